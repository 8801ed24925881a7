#!/usr/bin/env python3
"""genprofile.py - production-like profiles in pyagent's folded dialect.

A synthetic Python service: a web framework in site-packages calling the program's own
handlers, which call the standard library (json, re, socket) and native code. Stacks are random
walks over that call graph, depths follow a log-normal law (most stacks 10-30 frames, a tail
past 100), counts follow a Zipf law (a few hot stacks, a long tail of hair), several threads.

    genprofile.py --stacks 100000 --samples 1000000 -o big.folded
    genprofile.py --stacks 100000 --samples 1000000 --variant 1 -o big2.folded   # for diffs
    genprofile.py --hostile -o evil.folded   # names that try to break out of HTML/JSON/SVG

--variant N keeps the same program but changes its behaviour: some functions get slower,
some faster, some stacks disappear and new ones appear, as between two releases.
"""
import argparse
import math
import random
import sys

STDLIB = "/usr/lib/python3.11"
SITE = "/srv/venv/lib/python3.11/site-packages"
APP = "/srv/app"

WORDS = ("user order cart item price tax report cache session token query row batch event "
         "invoice payment stock search index page image feed score rule").split()
VERBS = ("get load save parse render compute validate build fetch update encode decode "
         "merge filter sort apply check resolve handle dispatch").split()


def make_program(rng, nfuncs):
    """Returns a list of functions (name, file, kind, lines) and their callees."""
    funcs = []
    modules = []
    for i in range(max(8, nfuncs // 40)):
        r = rng.random()
        w = rng.choice(WORDS)
        if r < 0.45:
            modules.append(("own", f"{APP}/{w}s/{rng.choice(VERBS)}_{i}.py"))
        elif r < 0.75:
            pkg = rng.choice(["django", "sqlalchemy", "requests", "numpy", "jinja2", "pydantic"])
            modules.append(("site", f"{SITE}/{pkg}/{w}_{i}.py"))
        elif r < 0.95:
            mod = rng.choice(["json/decoder", "json/encoder", "re/_parser", "socket", "ssl",
                              "threading", "logging/__init__", "collections/__init__"])
            modules.append(("stdlib", f"{STDLIB}/{mod}.py" if i % 3 else f"{STDLIB}/{mod}_{i}.py"))
        else:
            modules.append(("native", rng.choice(["libc.so.6", "libssl.so.3", "_json.cpython-311.so",
                                                  "libpython3.11.so.1.0"])))
    for i in range(nfuncs):
        kind, file = rng.choice(modules)
        if kind == "native":
            name = rng.choice(["memcpy", "PyObject_Call", "_PyEval_EvalFrameDefault", "SSL_read",
                               "scanstring_unicode", "malloc", "PyDict_GetItem"]) + f"_{i}"
        else:
            cls = rng.choice(WORDS).capitalize() + rng.choice(["Service", "View", "Manager", "Codec"])
            name = f"{rng.choice(VERBS)}_{rng.choice(WORDS)}"
            if rng.random() < 0.5:
                name = f"{cls}.{name}"
            if rng.random() < 0.05:
                name += ".<locals>.<lambda>"
        base = rng.randint(1, 900)
        lines = [base + rng.randint(0, 60) for _ in range(rng.randint(1, 4))]
        funcs.append((name, file, kind, lines))
    callees = []
    for i in range(nfuncs):
        if funcs[i][2] == "native":
            callees.append([j for j in rng.sample(range(nfuncs), 3) if funcs[j][2] == "native"] or [])
        else:
            callees.append(rng.sample(range(nfuncs), rng.randint(2, 7)))
    return funcs, callees


def frame(funcs, i, rng):
    name, file, kind, lines = funcs[i]
    if kind == "native":
        return f"{name} [{file}]"
    return f"{name} ({file}:{rng.choice(lines)})"


def generate(args):
    rng = random.Random(args.seed)
    funcs, callees = make_program(rng, args.functions)
    threads = ["MainThread"] + [f"worker-{i}" for i in range(1, args.threads)]
    tweights = [4] + [1] * (args.threads - 1)
    roots = rng.sample(range(len(funcs)), 12)
    vr = random.Random(args.seed * 1000 + args.variant)
    slower = set(vr.sample(range(len(funcs)), len(funcs) // 50)) if args.variant else set()
    faster = set(vr.sample(range(len(funcs)), len(funcs) // 50)) if args.variant else set()
    seen = {}
    order = []
    attempts = 0
    while len(order) < args.stacks and attempts < args.stacks * 20:
        attempts += 1
        thread = rng.choices(threads, tweights)[0]
        depth = int(min(args.max_depth, max(2, rng.lognormvariate(math.log(args.depth), 0.45))))
        cur = rng.choice(roots)
        idx = [cur]
        frames = [f"thread:{thread}", f"<module> ({APP}/main.py:{12 + roots.index(cur)})"]
        frames.append(frame(funcs, cur, rng))
        for _ in range(depth):
            nxt = callees[cur]
            if not nxt:
                break
            cur = rng.choice(nxt)
            idx.append(cur)
            frames.append(frame(funcs, cur, rng))
        key = ";".join(frames)
        if key in seen:
            continue
        seen[key] = idx
        order.append(key)
    n = len(order)
    # Zipf counts, at least one sample each, summing to exactly --samples.
    weights = [1.0 / (r + 1) ** 1.1 for r in range(n)]
    spare = max(0, args.samples - n)
    total_w = sum(weights)
    counts = [1 + int(spare * w / total_w) for w in weights]
    rest = args.samples - sum(counts)
    i = 0
    while rest > 0:
        counts[i % n] += 1
        rest -= 1
        i += 1
    if args.variant:
        for k in range(n):
            idx = seen[order[k]]
            if any(f in slower for f in idx):
                counts[k] *= 3
            elif any(f in faster for f in idx):
                counts[k] = max(1, counts[k] // 3)
            if vr.random() < 0.02:
                counts[k] = 0  # gone in this release
    out = open(args.output, "w") if args.output != "-" else sys.stdout
    out.write(f"# pyagent 1 rate=250 mode=cpu pid=4242 python=3.11.2 start=1763750000 "
              f"samples={sum(counts)} dropped=0\n")
    for k in range(n):
        if counts[k]:
            out.write(f"{order[k]} {counts[k]}\n")
    if args.variant:
        for j in range(max(1, n // 100)):
            out.write(f"thread:MainThread;<module> ({APP}/main.py:12);new_feature_{j} ({APP}/feature.py:{j + 1}) {vr.randint(1, 50)}\n")
    if out is not sys.stdout:
        out.close()


HOSTILE = [
    "</script><img src=x onerror=alert(1)>",
    "\"quoted\" 'single' &amp; <b>bold</b>",
    "ctl\x01\x02\x1b[31mred\x7f",
    "nul\x00byte",
    "bad utf8 \xff\xfe\xc3(",
    "]]><!-- --><![CDATA[",
    "\u2028line\u2029sep",
    "emoji \U0001F525 ok",
]


def hostile(args):
    out = open(args.output, "wb") if args.output != "-" else sys.stdout.buffer
    out.write(b"# pyagent 1 rate=100 mode=cpu\n")
    for i, name in enumerate(HOSTILE):
        raw = name.encode("utf-8", "surrogateescape") if "\xff" not in name else \
            name.encode("latin-1", "replace")
        out.write(b"thread:Main</script>;<module> (app.py:1);" + raw + b" (evil</script>.py:%d) %d\n"
                  % (i + 1, 10 + i))
    out.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stacks", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--functions", type=int, default=3000)
    ap.add_argument("--depth", type=float, default=14, help="median stack depth")
    ap.add_argument("--max-depth", type=int, default=160)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--variant", type=int, default=0)
    ap.add_argument("--hostile", action="store_true")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    if args.hostile:
        hostile(args)
    else:
        generate(args)


if __name__ == "__main__":
    main()
