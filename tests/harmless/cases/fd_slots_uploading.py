# harmless: timeout=60 env=PYAGENT_SERVER=http://127.0.0.1:9,PYAGENT_UPLOAD_INTERVAL=1,PYAGENT_LOG=error
"""Harm 12 (descriptors), while the agent uploads: every second the agent thread writes the
spool, names threads from /proc and tries to connect to the server (a refused port here), all
of which open descriptors. In the program's table each would take the lowest free number, 0
while the main thread has closed it to take it back: its open() then gets another number, or
its dup2 fails with EBUSY, or our close() closes its new descriptor 0. The agent thread works
in a descriptor table of its own."""
import threading
import time

from _util import FdZero

stop = threading.Event()


def worker():
    while not stop.is_set():
        sum(range(5000))
        time.sleep(0.001)


w = threading.Thread(target=worker)
w.start()
fd0 = FdZero()
end = time.monotonic() + 4.5
try:
    while time.monotonic() < end:
        fd0.close_zero()
        fd0.take_back()
finally:
    stop.set()
    w.join()
fd0.report()
