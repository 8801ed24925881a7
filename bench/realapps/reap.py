"""Runs a command as a child subreaper and waits for every process it leaves behind:
  python3 reap.py COMMAND...
Exits with the command's status. Used by run.py around each batch program so that the CPU
time of processes that leave the program's tree is counted too: 3.14+ start multiprocessing
workers from a forkserver that does not wait for them, so they are reparented, and wait4's
rusage on the program never includes them. Here they are reparented to us, and our own
rusage (which run.py reads with wait4) includes everything we reaped."""
import ctypes
import os
import sys

PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("reap.py: prctl(PR_SET_CHILD_SUBREAPER): %s" % os.strerror(ctypes.get_errno()))
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
code = 1
while True:
    try:
        p, status = os.wait()
    except ChildProcessError:
        break
    if p == pid:
        code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
