# harmless: timeout=90
"""Harm 4: _exit() called from a C signal handler that interrupted malloc must end the process
at once. Each child allocates in a loop while an interval timer's SIGALRM runs a handler that
is _exit itself (as a C library's handler would call it): the child must exit with status 14
(SIGALRM's number, the handler's argument), never hang."""
import sys

from _util import child, report

CHILD = r"""
import ctypes, signal, sys
sys.path.insert(0, sys.argv[1])
from _util import burn
libc = ctypes.CDLL(None)
burn(0.05)
libc.signal(signal.SIGALRM, ctypes.cast(libc._exit, ctypes.c_void_p))
signal.setitimer(signal.ITIMER_REAL, 0.01 + 0.0007 * int(sys.argv[2]))
keep = []
while True:
    keep = [bytearray(700 + 37 * i) for i in range(200)]
"""

here = sys.path[0]
for i in range(6):
    report("_exit from a SIGALRM handler during malloc, try %d" % i, child(CHILD, here, str(i), timeout=5))
