"""Line numbers within one code object sampled at many offsets: a module body whose twelve
busy loops run from its top to its end (each sample of <module> at a later offset than the
one before), then a function whose two loops run in turn (its offsets forward and back).
Every busy line ends with "# LOOP"; the test reads them from this file."""
import time


def zig(which):
    t = time.thread_time() + 0.02
    if which:
        while time.thread_time() < t: pass  # LOOP
    else:
        while time.thread_time() < t: pass  # LOOP


t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
t = time.thread_time() + 0.04
while time.thread_time() < t: pass  # LOOP
for k in range(24):
    zig(k % 2)
print("lines_many done")
