"""A thread, Masker, that spends most of its CPU time with SIGPROF blocked: in turns it blocks
SIGPROF, burns 20 ms of its CPU in masked_burn(), unblocks it and burns 2 ms in open_burn(),
until it has used argv[3] seconds. argv[2] says how it blocks: "libc" with
signal.pthread_sigmask (what Python programs do), "raw" with the rt_sigprocmask system call
itself, past any library. Writes the thread's own CPU time (time.thread_time), and the part of it
spent in masked_burn, to the JSON file named by argv[1]."""
import ctypes
import json
import platform
import signal
import sys
import threading
import time

from burn import burn_for

HOW = sys.argv[2]
SECONDS = float(sys.argv[3])
SYS_RT_SIGPROCMASK = {"x86_64": 14, "aarch64": 135}.get(platform.machine())


def block(on):
    if HOW == "libc":
        signal.pthread_sigmask(signal.SIG_BLOCK if on else signal.SIG_UNBLOCK, {signal.SIGPROF})
        return
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_uint64(1 << (signal.SIGPROF - 1))
    if libc.syscall(SYS_RT_SIGPROCMASK, 0 if on else 1, ctypes.byref(mask), None, 8) != 0:
        raise OSError(ctypes.get_errno(), "rt_sigprocmask")


def masked_burn():
    return burn_for(0.020)


def open_burn():
    return burn_for(0.002)


def masker(out):
    masked = 0.0
    while time.thread_time() < SECONDS:
        block(True)
        t0 = time.thread_time()
        masked_burn()
        masked += time.thread_time() - t0
        block(False)
        open_burn()
    out["thread_cpu"] = time.thread_time()
    out["masked_cpu"] = masked


if HOW == "raw" and SYS_RT_SIGPROCMASK is None:
    print("no rt_sigprocmask number for", platform.machine(), file=sys.stderr)
    sys.exit(2)
out = {}
t = threading.Thread(target=masker, args=(out,), name="Masker")
t.start()
t.join()
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
