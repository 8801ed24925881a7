# harmless: timeout=60
"""test_threading's situation: a worker thread forks; in the child that thread is the only
one, and when its function returns the thread ends with pthread_exit. The last thread gone,
the process must end (status 0): no thread of ours may keep it alive."""
import os
import signal
import threading
import time
import warnings

from _util import burn

# 3.12+ warns at a fork from a multi-threaded process, naming the pid: true with and without
# the agent here (the program has a worker thread), and the pid differs from run to run.
warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks",
                        category=DeprecationWarning)

result = []


def worker():
    burn(0.05)
    pid = os.fork()
    if pid == 0:
        burn(0.05)
        return  # the child's last thread ends here
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            result.append("child exit status %d" % os.waitstatus_to_exitcode(status)
                          if hasattr(os, "waitstatus_to_exitcode") else "child status %d" % status)
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    result.append("child still running after 10 s (killed)")


burn(0.1)
t = threading.Thread(target=worker)
t.start()
t.join()
print(result)
