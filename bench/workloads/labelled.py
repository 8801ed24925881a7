"""Spins at stack depth 30 for argv[2] CPU seconds under labels (bench/labels_cost.py):
argv[1] none: no pyagent at all; unlabelled: pyagent imported, no labels set; labelled: inside
pyagent.labels(endpoint=..., tenant=...); crowded: the same in a context that holds 40 other
context variables (the HAMT's root is then an array node: one more level to read); spanned:
labelled, and inside one OpenTelemetry root span with pyagent.SpanProcessor (the SDK on
PYTHONPATH: scripts/pythons.sh --otel); requests: the same with a new root span every 4 ms of
CPU, so that most samples are of a span the stack table has not seen (a new slot each)."""
import contextvars
import sys

from depth import level

MODE, SECONDS = sys.argv[1], float(sys.argv[2])
if MODE != "none":
    import pyagent


def run():
    if MODE in ("spanned", "requests"):
        from opentelemetry.sdk.trace import TracerProvider
        provider = TracerProvider()
        provider.add_span_processor(pyagent.SpanProcessor())
        tracer = provider.get_tracer("labelled.py")
        with pyagent.labels(endpoint="/api/orders", tenant="t1"):
            if MODE == "spanned":
                with tracer.start_as_current_span("GET /api/orders"):
                    level(29, SECONDS)
            else:
                for _ in range(int(SECONDS / 0.004)):
                    with tracer.start_as_current_span("GET /api/orders"):
                        level(29, 0.004)
    elif MODE in ("labelled", "crowded"):
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
