# harmless: modes=cpu-tick,cpu-perf,wall,native timeout=60
"""Harms 9-10 (descriptors): the descriptors a program and its children see are their own,
whatever drives the samples (POSIX timers in cpu-tick; perf events in cpu-perf, and in wall
and native, where the timer is auto). The program lists /proc/self/fd while its main thread
and a second thread are sampled, after a thread paused and resumed its timer (blocked and
unblocked SIGPROF), after threads came and went, and after it closed every descriptor above 2
and went on running threads; a Python child with close_fds lists its own and must see only 0,
1 and 2 (a perf-event descriptor of ours was visible there, and in the program: one per
sampled thread, docs/harmless.md class 10)."""
import os
import signal
import subprocess
import sys
import threading

from _util import burn

LIST = r"""
import os, time
t = time.thread_time()
while time.thread_time() - t < 0.3:
    sum(range(1000))
d = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
print(sorted(int(n) for n in os.listdir(d) if int(n) != d))
"""


def fds():
    d = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    try:
        return sorted(int(n) for n in os.listdir(d) if int(n) != d)
    finally:
        os.close(d)


def in_thread(fn):
    th = threading.Thread(target=fn)
    th.start()
    th.join()


def busy_then_list(seen):
    burn(0.2)
    seen.append(fds())


def pause_resume(seen):
    burn(0.1)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPROF])
    burn(0.1)
    seen.append(fds())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPROF])
    burn(0.2)
    seen.append(fds())


burn(0.3)
seen = []
th = threading.Thread(target=busy_then_list, args=(seen,))
th.start()
burn(0.3)
th.join()
print("program, main thread:", fds())
print("program, second thread:", seen[0])

seen = []
in_thread(lambda: pause_resume(seen))
print("program, paused thread:", seen[0], "after resuming:", seen[1])

for _ in range(20):
    in_thread(lambda: burn(0.02))
print("program, after 20 threads came and went:", fds())

os.closerange(3, 1 << 16)
seen = []
in_thread(lambda: busy_then_list(seen))
burn(0.2)
print("program, after closerange(3, ...):", fds(), "a new thread:", seen[0])

r = subprocess.run([sys.executable, "-c", LIST], close_fds=True, stdout=subprocess.PIPE,
                   text=True, timeout=30)
print("child with close_fds:", r.stdout.strip(), "exit", r.returncode)
