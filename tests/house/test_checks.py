#!/usr/bin/env python3
"""The house checks can fail: each is shown a violation and must report it.

    tests/house/test_checks.py

check_layers.py must report an upward include, an upward symbol reference and a cycle of
files within a part; check_handler.py must find a call that is not async-signal-safe two calls
below a root (through a local helper), must not follow a function whose address is only
taken, and must tell a function bound on first call (a PLT call, -z lazy) from one bound at load
(-fno-plt); check_errors.py must report a message buffer passed as (char *, size_t) and accept
pa_error. Exit status 0 when every check caught what it was shown."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_errors  # noqa: E402
import check_handler  # noqa: E402
import check_layers  # noqa: E402

SRC = os.path.dirname(os.path.dirname(HERE))
failures = []
checks = [0]


def expect(cond, what):
    checks[0] += 1
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def layers():
    p = lambda *a: os.path.join(SRC, *a)  # noqa: E731
    up_inc = check_layers.check_parts([(p("agent", "frames.c"), p("shim", "shim.h"))], SRC, "include")
    expect(len(up_inc) == 1 and "upward include" in up_inc[0] and "agent may use only base, profile" in up_inc[0],
           "check_layers reports agent/ including a shim/ header: %r" % up_inc)
    up_sym = check_layers.check_parts([(p("profile", "model.c"), p("collector", "store.c"), "pa_coll_x")], SRC,
                                      "reference")
    expect(len(up_sym) == 1 and "uses pa_coll_x" in up_sym[0],
           "check_layers reports profile/ using a collector/ symbol: %r" % up_sym)
    down = check_layers.check_parts([(p("uploader", "send.c"), p("base", "log.c"), "pa_log")], SRC, "reference")
    expect(down == [], "check_layers accepts uploader/ using base/: %r" % down)
    loop = check_layers.check_cycles([(p("collector", "a.c"), p("collector", "b.c"), "f"),
                                      (p("collector", "b.c"), p("collector", "c.c"), "g"),
                                      (p("collector", "c.c"), p("collector", "a.c"), "h")], SRC)
    expect(len(loop) == 1 and "cycle in collector/" in loop[0], "check_layers reports a cycle of three files: %r" % loop)
    chain = check_layers.check_cycles([(p("collector", "a.c"), p("collector", "b.c"), "f")], SRC)
    expect(chain == [], "check_layers accepts a chain: %r" % chain)


def handler():
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "bad_handler.c.o")
        subprocess.run(["cc", "-O2", "-ffunction-sections", "-c", os.path.join(HERE, "fixtures", "bad_handler.c"),
                        "-o", obj], check=True)
        o = check_handler.Obj(obj, "tests/house/fixtures/bad_handler.c")
        seen, external = check_handler.reachable([o], [("tests/house/fixtures/bad_handler.c", "bad_root")])
        names = {fn for _, fn in seen}
        expect("helper" in names or any(n.startswith("helper.") for n in names),
               "check_handler follows a call to a local helper: %r" % sorted(names))
        expect("malloc" in external and "malloc" not in check_handler.ALLOWED,
               "check_handler finds malloc two calls below the root: %r" % sorted(external))
        expect("only_stored" not in names and "strdup" not in external,
               "check_handler does not follow a function whose address is only taken: %r" % sorted(names))
        # Rule 3: linked with -z lazy, a PLT call is bound on first call; -fno-plt binds at load.
        for flags, lazy in (([], True), (["-fno-plt"], False)):
            lib = os.path.join(tmp, "bad_handler%s.so" % "".join(flags))
            subprocess.run(["cc", "-O2", "-fPIC", "-shared", *flags, "-Wl,-z,lazy",
                            os.path.join(HERE, "fixtures", "bad_handler.c"), "-o", lib], check=True)
            bound = check_handler.lazily_bound(lib)
            expect(("malloc" in bound) == lazy,
                   "check_handler sees malloc bound %s in a library built with %s: %r"
                   % ("on first call" if lazy else "at load", flags or "PLT calls", sorted(bound)))


def errors():
    bad = check_errors.violations("int f(const char *s,\n      char *msg, size_t msglen);\n", "x/f.h")
    expect(len(bad) == 1 and bad[0].startswith("x/f.h:2:"),
           "check_errors reports a (char *msg, size_t msglen) pair: %r" % bad)
    good = check_errors.violations("int f(const char *s, pa_error *err);\nchar *name, size_t n;\n", "x/f.h")
    expect(good == [], "check_errors accepts pa_error and buffers that are not messages: %r" % good)


layers()
handler()
errors()
print("%d passed, %d failed" % (checks[0] - len(failures), len(failures)))
sys.exit(1 if failures else 0)
