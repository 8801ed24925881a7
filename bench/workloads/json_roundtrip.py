import json

doc = {"items": [{"id": i, "name": "item%d" % i, "tags": ["a", "b", "c"], "price": i * 1.5} for i in range(200)]}
n = 0
for _ in range(600):
    n += len(json.loads(json.dumps(doc))["items"])
print(n)
