# harmless: timeout=120
"""Deaths by signal: what a program sees of the default-fatal signals' dispositions, and how it
ends, must not change (the agent's death handler stands in for SIG_DFL only). Each child looks
at the C library's view (sigaction) and Python's (signal.getsignal), at a blocked signal
(sigpending), at SIG_IGN and at a handler put back to SIG_DFL, then ends by a signal; the
runner compares the wait status, core flag included."""
import sys

from _util import child, report

PRELUDE = r"""
import ctypes, os, signal, sys
sys.path.insert(0, sys.argv[1])
from _util import burn
libc = ctypes.CDLL(None, use_errno=True)
DEADLY = [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1,
          signal.SIGUSR2, signal.SIGALRM]
def c_handler(sig):
    buf = ctypes.create_string_buffer(256)
    if libc.sigaction(sig, None, buf) != 0:
        return "error %d" % ctypes.get_errno()
    h = int.from_bytes(buf.raw[:8], "little")
    flags = int.from_bytes(buf.raw[136:140], "little")
    return {0: "SIG_DFL", 1: "SIG_IGN"}.get(h, "a handler") + " flags=%#x" % (flags & 0x4)
burn(0.2)
"""

VIEWS = PRELUDE + r"""
for s in DEADLY:
    print(signal.Signals(s).name, c_handler(s), signal.getsignal(s))
"""

BLOCKED = PRELUDE + r"""
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
os.kill(os.getpid(), signal.SIGTERM)
print("pending", sorted(signal.Signals(s).name for s in signal.sigpending()), flush=True)
burn(0.2)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
print("survived the unblock")
"""

IGNORED = PRELUDE + r"""
signal.signal(signal.SIGHUP, signal.SIG_IGN)
print("SIGHUP", c_handler(signal.SIGHUP), flush=True)
os.kill(os.getpid(), signal.SIGHUP)
burn(0.1)
print("survived SIGHUP", flush=True)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
print("SIGHUP", c_handler(signal.SIGHUP), signal.getsignal(signal.SIGHUP), flush=True)
os.kill(os.getpid(), signal.SIGHUP)
burn(1)
print("survived the second SIGHUP")
"""

HANDLED_THEN_DEFAULT = PRELUDE + r"""
old = signal.signal(signal.SIGUSR1, lambda s, f: print("handler ran", flush=True))
print("old", old)
os.kill(os.getpid(), signal.SIGUSR1)
burn(0.1)
print("back from a handler:", callable(signal.signal(signal.SIGUSR1, signal.SIG_DFL)), flush=True)
print("SIGUSR1", c_handler(signal.SIGUSR1), flush=True)
os.kill(os.getpid(), signal.SIGQUIT)
burn(1)
print("survived SIGQUIT")
"""

INT_DEFAULT = PRELUDE + r"""
signal.signal(signal.SIGINT, signal.SIG_DFL)
print("SIGINT", c_handler(signal.SIGINT), flush=True)
os.kill(os.getpid(), signal.SIGINT)
burn(1)
print("survived SIGINT")
"""

here = sys.path[0]
report("dispositions as seen", child(VIEWS, here, timeout=30))
report("SIGTERM blocked, then unblocked", child(BLOCKED, here, timeout=30))
report("SIGHUP ignored, then default", child(IGNORED, here, timeout=30))
report("SIGUSR1 handled, then default; SIGQUIT", child(HANDLED_THEN_DEFAULT, here, timeout=30))
report("SIGINT set to default by the program", child(INT_DEFAULT, here, timeout=30))
