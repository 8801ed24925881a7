# harmless: timeout=60
"""Harms 9-10 (descriptors): the descriptors a program and its children see are their own.
The program lists its descriptors after its main thread and a second thread have run (every
timer armed), and runs a Python child with close_fds that lists its own: the child must see
only 0, 1 and 2 (a descriptor of ours, at 512 before, was visible there). In every mode: a
perf-event timer is held by its ring mapping alone and is made in a helper with a table of its
own, and POSIX timers need no descriptor (docs/architecture.md, "Timers and modes")."""
import os
import subprocess
import sys
import threading
import time

LIST = r"""
import os, time
t = time.monotonic()
while time.monotonic() - t < 0.3:
    sum(range(1000))
d = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
print(sorted(int(n) for n in os.listdir(d) if int(n) != d))
"""


def busy(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        sum(range(1000))


busy(0.3)
th = threading.Thread(target=busy, args=(0.3,))
th.start()
time.sleep(0.1)
d = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
print("program, while a second thread runs:", sorted(int(n) for n in os.listdir(d) if int(n) != d))
os.close(d)
th.join()
r = subprocess.run([sys.executable, "-c", LIST], close_fds=True, stdout=subprocess.PIPE,
                   text=True, timeout=30)
print("child with close_fds:", r.stdout.strip(), "exit", r.returncode)
