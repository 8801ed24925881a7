# harmless: modes=cpu-tick,cpu-perf,native timeout=60
"""Harm 7: a single-threaded program is single-threaded under the agent too. It counts its
threads (/proc/self/status), forks with DeprecationWarning made an error (3.12+ warns "use of
fork() may lead to deadlocks" when it sees more than one thread), and calls
unshare(CLONE_NEWUSER), which the kernel refuses to a multi-threaded process (EINVAL). Not in
wall mode, whose tick thread (docs/harmless.md, class 6) is a thread of ours by design."""
import ctypes
import os
import time
import warnings

warnings.simplefilter("error", DeprecationWarning)


def threads():
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("Threads:"))


def busy(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        sum(range(1000))


busy(0.3)
print("threads at start:", threads())
pid = os.fork()
if pid == 0:
    busy(0.2)
    print("child threads:", threads(), flush=True)
    os._exit(0)
print("fork child status:", os.waitpid(pid, 0)[1])
busy(0.3)
print("threads later:", threads())
pid = os.fork()
if pid == 0:                          # the unshare in a child: the program itself stays as it is
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.unshare(0x10000000)      # CLONE_NEWUSER
    print("unshare(CLONE_NEWUSER):", "ok" if r == 0 else os.strerror(ctypes.get_errno()),
          flush=True)
    os._exit(0)
os.waitpid(pid, 0)
