"""Harm 16 (a thread's own small stack): Python lets a program give its threads small stacks
(threading.stack_size: 32 KiB at least before 3.15, 52 KiB on 3.15), and C code may run deep
in them. A signal handler runs on the interrupted thread's stack, below what the thread uses;
a profiler's handler that needs more than is left writes into the guard page below it and the
process dies of SIGSEGV (native frames took 22 KiB; a Python walk 10 KiB). Here two threads with
the smallest stack the interpreter allows burn CPU in C with 6 KiB of their stack left
(helpers/stackend.c): the program must run to its end as without the agent."""
import ctypes
import os
import sys
import threading

from _util import SETUP_FAILED, helper

lib = helper("stackend")
lib.stackend_burn.argtypes = [ctypes.c_long, ctypes.c_long]
lib.stackend_burn.restype = ctypes.c_long

for size in (32768, 53248, 65536):
    try:
        threading.stack_size(size)
        break
    except ValueError:
        continue
else:
    print("no small thread stack size accepted", file=sys.stderr)
    sys.exit(SETUP_FAILED)

left = []


def work():
    left.append(lib.stackend_burn(6 * 1024, 400 * 1000 * 1000))  # 0.4 s of CPU time


threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if any(n < 0 for n in left):
    print("the helper found no room to descend: %r" % left, file=sys.stderr)
    sys.exit(SETUP_FAILED)
if os.environ.get("STACKEND_LEFT"):
    print("stack size %d, bytes left at the burn: %r" % (size, left), file=sys.stderr)
print("threads that burned near the end of a %s stack: %d" % ("small", len(left)))
