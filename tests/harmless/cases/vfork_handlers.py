"""Harm 2: subprocess.run (a vfork child resets signal handlers with sigaction, in the
parent's memory) must leave the parent's handlers alone: faulthandler still reports a real
segfault afterwards, and a program's own SIGPROF handler (ITIMER_PROF, as yappi and vmprof
use it) still gets its signals."""
from _util import child, report

FAULT = r"""
import ctypes, faulthandler, subprocess, sys
sys.path.insert(0, sys.argv[1])
from _util import burn
faulthandler.enable()
burn(0.1)
subprocess.run(["/bin/true"])
burn(0.05)
ctypes.string_at(0)
"""

ITIMER = r"""
import signal, subprocess, sys
sys.path.insert(0, sys.argv[1])
from _util import burn
got = []
signal.signal(signal.SIGPROF, lambda s, f: got.append(s))
burn(0.1)
subprocess.run(["/bin/true"])
print("handler kept:", signal.getsignal(signal.SIGPROF) is not signal.SIG_DFL)
signal.setitimer(signal.ITIMER_PROF, 0.005, 0.005)
burn(0.3)
signal.setitimer(signal.ITIMER_PROF, 0, 0)
print("own SIGPROF handler called:", len(got) > 0)
"""

here = __import__("sys").path[0]
st, out, err = child(FAULT, here)
# The report's first line; the rest names thread addresses.
report("segfault after subprocess.run", (st, out, err.splitlines()[0] if err else ""))
report("ITIMER_PROF after subprocess.run", child(ITIMER, here))
