# harmless: timeout=60
"""Harm 1: os.execv after sampling started. The new image must not inherit a pending or armed
timer signal of ours (SIGPROF's default action ends a program that does not expect it).
Children that spent CPU time (with busy threads beside them) exec a shell and a Python. One
ignores SIGPROF, fails an exec, then execs a shell that shows its ignored signals: SIG_IGN is
kept across exec."""
import sys

from _util import child, report

CHILD = r"""
import os, sys, threading
sys.path.insert(0, sys.argv[1])
from _util import burn
for _ in range(int(sys.argv[2])):
    threading.Thread(target=burn, args=(100,), daemon=True).start()
burn(0.1)
if sys.argv[3] == "sh":
    os.execv("/bin/sh", ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo sh ran; exit 3"])
else:
    os.execv(sys.executable, [sys.executable, "-c", "print('python ran'); raise SystemExit(4)"])
"""

IGNORE = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from _util import burn
signal.signal(signal.SIGPROF, signal.SIG_IGN)
burn(0.1)
try:
    os.execv("/nonexistent/program", ["x"])
except OSError as e:
    print("exec of a missing program failed:", os.strerror(e.errno))
burn(0.05)
os.execv("/bin/sh", ["sh", "-c", "grep SigIgn /proc/self/status"])
"""

here = sys.path[0]
for image in ("sh", "python"):
    for threads in (0, 2):
        report("exec %s after sampling, %d busy threads" % (image, threads),
               child(CHILD, here, str(threads), image))
report("SIGPROF ignored, failed exec, then exec", child(IGNORE, here))
