"""Spins at stack depth 30 for argv[2] CPU seconds under labels (bench/labels_cost.py):
argv[1] none: no pyagent at all; unlabelled: pyagent imported, no labels set; labelled: inside
pyagent.labels(endpoint=..., tenant=...); crowded: the same in a context that holds 40 other
context variables (the HAMT's root is then an array node: one more level to read)."""
import contextvars
import sys

from depth import level

MODE, SECONDS = sys.argv[1], float(sys.argv[2])
if MODE != "none":
    import pyagent


def run():
    if MODE in ("labelled", "crowded"):
        with pyagent.labels(endpoint="/api/orders", tenant="t1"):
            level(29, SECONDS)
    else:
        level(29, SECONDS)


if MODE == "crowded":
    def crowded():
        held = [contextvars.ContextVar("v%d" % i) for i in range(40)]
        for i, v in enumerate(held):
            v.set(i)
        run()
    contextvars.Context().run(crowded)
else:
    run()
