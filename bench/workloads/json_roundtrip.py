import sys

import json


def run():
    doc = {"items": [{"id": i, "name": "item%d" % i, "tags": ["a", "b", "c"], "price": i * 1.5} for i in range(200)]}
    n = 0
    for _ in range(600):
        n += len(json.loads(json.dumps(doc))["items"])
    print(n)


# The bench repeats the work (argv[1]) so that it lasts a few CPU-seconds.
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    run()
