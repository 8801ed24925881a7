"""Harm 3: chaining to the program's SIGSEGV/SIGBUS/SIGPROF handlers must behave as the kernel
would: a sent SIGSEGV (kill) takes the default action at once, faulthandler's own raise ends
the process, a handler installed with SA_RESETHAND that returns leads to the default action
(not a loop), and the handler runs with its sa_mask (and SA_NODEFER) and gets its siginfo."""
import sys

from _util import child, report

SETUP = r"""
import ctypes, os, signal, sys
sys.path.insert(0, sys.argv[1])
from _util import burn
libc = ctypes.CDLL(None, use_errno=True)
SA_SIGINFO, SA_NODEFER, SA_RESETHAND = 4, 0x40000000, 0x80000000
class Sigaction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
def install(sig, handler, flags=0, mask=()):
    sa = Sigaction()
    sa.handler = handler
    sa.flags = flags
    for s in mask:
        sa.mask[0] |= 1 << (s - 1)
    if libc.sigaction(sig, ctypes.byref(sa), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
def blocked():
    return sorted(signal.Signals(s).name for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
burn(0.1)
"""

KILL = SETUP + r"""
os.kill(os.getpid(), signal.SIGSEGV)
print("survived a sent SIGSEGV")
"""

FAULTHANDLER = SETUP + r"""
import faulthandler
faulthandler.enable()
faulthandler._sigsegv()
print("survived faulthandler._sigsegv")
"""

RESETHAND_FAULT = SETUP + r"""
install(signal.SIGSEGV, ctypes.cast(libc.getpid, ctypes.c_void_p).value, SA_RESETHAND)
ctypes.string_at(0)
print("survived a segfault")
"""

RESETHAND_SENT = SETUP + r"""
install(signal.SIGSEGV, ctypes.cast(libc.getpid, ctypes.c_void_p).value, SA_RESETHAND)
os.kill(os.getpid(), signal.SIGSEGV)
print("survived the first sent SIGSEGV")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGSEGV)
print("survived the second sent SIGSEGV")
"""

MASKS = SETUP + r"""
seen = []
H = ctypes.CFUNCTYPE(None, ctypes.c_int)
I = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p)
plain = H(lambda s: seen.append(blocked()))
info = I(lambda s, si, uc: seen.append(["signo=%d code=%d" % (si[0], si[2])] + blocked()))
for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGPROF):
    name = signal.Signals(sig).name
    for how, handler, flags, mask in (
        ("plain, sa_mask=USR1", plain, 0, (signal.SIGUSR1,)),
        ("SA_NODEFER", plain, SA_NODEFER, ()),
        ("SA_SIGINFO, sa_mask=USR2", info, SA_SIGINFO, (signal.SIGUSR2,)),
    ):
        install(sig, ctypes.cast(handler, ctypes.c_void_p).value, flags, mask)
        os.kill(os.getpid(), sig)
        print("%s %s: handler saw %s" % (name, how, seen.pop() if seen else "nothing"))
    print("%s mask after the handler: %s" % (name, blocked()))
"""

here = sys.path[0]
report("kill(SIGSEGV) with the default action", child(KILL, here))
st, out, err = child(FAULTHANDLER, here)
report("faulthandler._sigsegv()", (st, out, err.splitlines()[0] if err else ""))
report("segfault, SA_RESETHAND handler that returns", child(RESETHAND_FAULT, here, timeout=10))
report("sent SIGSEGV twice, SA_RESETHAND handler", child(RESETHAND_SENT, here, timeout=10))
report("handler masks and siginfo", child(MASKS, here))
