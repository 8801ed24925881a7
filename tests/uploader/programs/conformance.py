"""Spends argv[1] seconds of CPU in code whose names break naive encoders: a function whose
name holds a lone surrogate (no UTF-8 for it), one of 1600 bytes of two-byte characters that
the agent's frame buffer cuts in the middle of a character (invalid UTF-8), names and file
names with ';', '{', '}', ',' and newlines, a 100 KB function name, a 10,000-frame recursion,
and threads whose names hold separators or are cut mid-character. Prints a deterministic
line."""
import sys
import threading
import time

SECONDS = float(sys.argv[1])


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def named(name, filename):
    """A function called `name`, compiled from `filename`, that spins."""
    ns = {"spin": spin}
    exec(compile("def f(s):\n    spin(s)\n", filename, "exec"), ns)
    f = ns["f"]
    f.__code__ = f.__code__.replace(co_name=name, co_qualname=name) if sys.version_info >= (3, 11) \
        else f.__code__.replace(co_name=name)
    return f


def recurse(n, seconds):
    if n == 0:
        spin(seconds)
        return 0
    return recurse(n - 1, seconds) + 1


sys.setrecursionlimit(12000)
parts = [
    named("bad\udcffname", "surrogate.py"),
    named("semi;colon{brace},comma\nnewline", "odd;{file},name\n.py"),
    named("n" * 100000, "long.py"),
    named("\u00fc" * 800, "cut.py"),
    lambda s: recurse(10000, s),
]
threads = [threading.Thread(target=lambda: spin(SECONDS / 6), name=n) for n in ("thr;ead{x},y\nz", "\u00e9" * 40)]
for t in threads:
    t.start()
for f in parts:
    f(SECONDS / 6)
for t in threads:
    t.join()
print("conformance done")
