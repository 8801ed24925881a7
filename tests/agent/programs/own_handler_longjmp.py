"""A signal handler of the program's that leaves by siglongjmp, many times a second.

    python own_handler_longjmp.py OUT.json CPU_SECONDS JUMPOUT_SO

jumpout.so (tests/harmless/helpers/jumpout.c) has a second thread send SIGUSR1 to this thread
every 50 us; its C handler jumps back into a loop that burns CPU in burn() until the thread
has used CPU_SECONDS. OUT.json: the thread's CPU time over the loop ("total") and the jumps ("jumps")."""
import ctypes
import json
import sys
import time

OUT, CPU, LIB = sys.argv[1], float(sys.argv[2]), sys.argv[3]
lib = ctypes.CDLL(LIB)
lib.jumpout_burn.argtypes = [ctypes.c_long, ctypes.c_long]
lib.jumpout_burn.restype = ctypes.c_long


def burn():
    return lib.jumpout_burn(int(CPU * 1e9), 50)


t0 = time.thread_time()
jumps = burn()
total = time.thread_time() - t0
if jumps < 0:
    sys.exit("jumpout_burn could not set up its handler or timer")
with open(OUT, "w") as f:
    json.dump({"total": total, "jumps": jumps}, f)
print("own_handler_longjmp done")
