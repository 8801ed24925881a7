"""Harm 11: a handler of the program's must run with the mask the kernel gives it without us,
even when its signal and our timer's SIGPROF are pending at the same moment (a kill() to
itself while a CPU-time timer fires in that system call: the timer's signal, queued for the
thread, is delivered first, and the program's handler nests on our handler's first
instruction). Before the fix, 4% of these handlers ran with SIGPROF blocked (tick timers,
1 kHz). A C-level handler (through ctypes) for SIGUSR1 and SIGSEGV records the mask it runs
with, 3 s of CPU time of kill() calls."""
import ctypes
import os
import signal
import time

libc = ctypes.CDLL(None, use_errno=True)


class Sigaction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


mask = (ctypes.c_ulong * 16)()
calls = {"all": 0, "prof": 0, "other": 0}
WANT = {signal.SIGUSR1: 1 << (signal.SIGUSR1 - 1), signal.SIGSEGV: 1 << (signal.SIGSEGV - 1)}


def handler(sig):
    libc.pthread_sigmask(signal.SIG_BLOCK, None, mask)
    calls["all"] += 1
    if mask[0] & (1 << (signal.SIGPROF - 1)):
        calls["prof"] += 1
    if mask[0] != WANT[sig] or any(mask[1:]):
        calls["other"] += 1


c_handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(handler)
for sig in WANT:
    sa = Sigaction()
    sa.handler = ctypes.cast(c_handler, ctypes.c_void_p).value
    if libc.sigaction(sig, ctypes.byref(sa), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
pid = os.getpid()
end = time.thread_time() + 3
while time.thread_time() < end:
    os.kill(pid, signal.SIGUSR1)
    os.kill(pid, signal.SIGSEGV)
print("handlers ran:", calls["all"] > 1000)
print("handlers that ran with SIGPROF blocked:", calls["prof"])
print("handlers whose mask was not just their own signal:", calls["other"])
