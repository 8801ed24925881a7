-- wrk script: POST /ingest with a typical 10-second folded profile (about 200 unique stacks,
-- depth 10-30) per request; every request is a new interval of one of 50 processes.
local counter = 0
local t0 = os.time() - 3600
local body

local function make_body()
  local lines = {}
  math.randomseed(7)
  for i = 1, 200 do
    local frames = {"thread:MainThread", "<module> (app.py:10)"}
    local depth = 10 + (i % 20)
    for d = 1, depth do
      frames[#frames + 1] = string.format("fn_%d_%d (/srv/app/mod%d.py:%d)", d, i % (d + 3),
                                          d % 7, 10 + (i * d) % 300)
    end
    lines[#lines + 1] = table.concat(frames, ";") .. " " .. tostring(1 + (i * 37) % 40)
  end
  return table.concat(lines, "\n") .. "\n"
end

init = function(args)
  body = make_body()
end

request = function()
  counter = counter + 1
  local pid = counter % 50
  local from = t0 + math.floor(counter / 50) * 10
  local path = string.format("/ingest?name=bench.cpu%%7Bhost%%3Dbench%%2Cpid%%3D%d%%7D" ..
                             "&from=%d&until=%d&sampleRate=100&spyName=pyagent&format=folded",
                             pid, from, from + 10)
  return wrk.format("POST", path, {["Content-Type"] = "text/plain"}, body)
end

done = function(summary, latency, requests)
  local non2xx = summary.errors.status
  local e = summary.errors
  io.write(string.format("RESULT requests=%d rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d " ..
    "(non2xx=%d connect=%d read=%d write=%d timeout=%d)\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    non2xx + e.connect + e.read + e.write + e.timeout, non2xx, e.connect, e.read, e.write,
    e.timeout))
end
