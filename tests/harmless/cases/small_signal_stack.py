"""Harm 15 (a signal on the program's small alternate stack): faulthandler gives the main
thread a sigaltstack of a few tens of KiB from malloc, and CPython installs its signal handlers
with SA_ONSTACK. A SIGPROF that arrives while such a handler runs is delivered on that small
stack too (the kernel stays on an alternate stack once on it), whatever SA_ONSTACK says. A
profiler's handler that needs more stack than is left there writes below it, into the memory
malloc put there: CPython's test_io died in the garbage collector on a corrupted dict in native
mode (2 runs in 11). Here a SIGUSR1 handler with SA_ONSTACK burns CPU on a 16 KiB alternate
stack (helpers/altstack.c) between two guard zones; nothing may be written outside the stack."""
import ctypes
import os
import signal
import sys

from _util import SETUP_FAILED, helper

lib = helper("altstack")
lib.altstack_setup.argtypes = [ctypes.c_size_t, ctypes.c_long]
lib.altstack_damage.restype = ctypes.c_long
lib.altstack_used.restype = ctypes.c_long
if lib.altstack_setup(16384, 20) != 0:
    print("cannot set up the alternate stack", file=sys.stderr)
    sys.exit(SETUP_FAILED)
for _ in range(60):
    os.kill(os.getpid(), signal.SIGUSR1)  # 20 ms of CPU time in the handler, on that stack
print("handlers run on the alternate stack: 60")
print("bytes written outside it:", lib.altstack_damage())
if os.environ.get("ALTSTACK_USED"):
    print("bytes of it used:", lib.altstack_used(), file=sys.stderr)
