# harmless: timeout=60 env=PYAGENT_SERVER=http://127.0.0.1:9,PYAGENT_UPLOAD_INTERVAL=1,PYAGENT_LOG=error
"""Harm 12 (descriptors), while the agent uploads: every second the agent thread writes the
spool, names threads from /proc and tries to connect to the server (a refused port here), all
of which open descriptors. In the program's table each would take the lowest free number, 0
while the main thread has closed it to take it back: its open() then gets another number, or
its dup2 fails with EBUSY, or our close() closes its new descriptor 0. The agent thread works
in a descriptor table of its own."""
import os
import threading
import time

stop = threading.Event()


def worker():
    while not stop.is_set():
        sum(range(5000))
        time.sleep(0.001)


w = threading.Thread(target=worker)
w.start()
saved = os.dup(0)
n = wrong = busy = gone = 0
end = time.monotonic() + 4.5
try:
    while time.monotonic() < end:
        try:
            os.close(0)
        except OSError:
            gone += 1
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 0:
            wrong += 1
        os.close(fd)
        for _ in range(1000):
            try:
                os.dup2(saved, 0)
                break
            except OSError:
                busy += 1
        n += 1
finally:
    stop.set()
    w.join()
print("iterations:", n > 1000)
print("open() after close(0) that did not return 0:", wrong)
print("dup2 onto 0 that failed (EBUSY):", busy)
print("descriptor 0 found closed by someone else:", gone)
