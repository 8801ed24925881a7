"""Harm 12: a descriptor the program closes is the program's to take again: open() after
close(0) returns 0 (POSIX: the lowest free number) and dup2 onto it succeeds. An agent thread
that opens files (wall mode reads /proc/self/task/TID/syscall for each waiting thread, many
times a second) takes the lowest free number for a moment: the program's open() then gets
another number, or its dup2 fails with EBUSY, or a child started meanwhile sees a descriptor 0
it never had (CPython's test_subprocess, wall mode: test_close_fds, test_close_fd_0). Eight
threads sleep in a loop while the main thread closes and takes back descriptor 0 for 4 s."""
import os
import threading
import time

stop = threading.Event()


def sleeper():
    while not stop.is_set():
        time.sleep(0.01)


threads = [threading.Thread(target=sleeper) for _ in range(8)]
for t in threads:
    t.start()
saved = os.dup(0)
n = wrong = busy = gone = 0
end = time.monotonic() + 4
try:
    while time.monotonic() < end:
        try:
            os.close(0)
        except OSError:
            gone += 1  # someone closed the program's descriptor 0 (and not the program)
        fd = os.open(os.devnull, os.O_RDONLY)
        os.close(fd)
        wrong += fd != 0
        for tries in range(1000):
            try:
                os.dup2(saved, 0)
                break
            except OSError:
                busy += 1
        n += 1
finally:
    stop.set()
    for t in threads:
        t.join()
print("iterations:", n > 1000)
print("open() after close(0) that did not return 0:", wrong)
print("dup2 onto 0 that failed (EBUSY):", busy)
print("descriptor 0 found closed by someone else:", gone)
