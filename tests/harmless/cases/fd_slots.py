"""Harm 12: a descriptor the program closes is the program's to take again: open() after
close(0) returns 0 (POSIX: the lowest free number) and dup2 onto it succeeds. An agent thread
that opens files (wall mode reads /proc/self/task/TID/syscall for each waiting thread, many
times a second) takes the lowest free number for a moment: the program's open() then gets
another number, or its dup2 fails with EBUSY, or a child started meanwhile sees a descriptor 0
it never had (CPython's test_subprocess, wall mode: test_close_fds, test_close_fd_0). Eight
threads sleep in a loop while the main thread closes and takes back descriptor 0 for 4 s."""
import threading
import time

from _util import FdZero

stop = threading.Event()


def sleeper():
    while not stop.is_set():
        time.sleep(0.01)


threads = [threading.Thread(target=sleeper) for _ in range(8)]
for t in threads:
    t.start()
fd0 = FdZero()
end = time.monotonic() + 4
try:
    while time.monotonic() < end:
        fd0.close_zero()
        fd0.take_back()
finally:
    stop.set()
    for t in threads:
        t.join()
fd0.report()
