-- The request mix of the real-application benchmark (run.py): the catalogue page, the JSON
-- API and a search, in turn.
local paths = {"/", "/api/items?n=50", "/search?q=ma"}
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
