"""A parent that burns 0.2 s of CPU, then forks a child whose first work is all in the kernel (getrandom filling 128 MiB: no user
time to speak of), then 0.3 s of Python in child_burn(); it reports its CPU time (getrusage)
in child_cpu.txt and ends with os._exit. pids.txt: the child's pid."""
import os
import resource
import time


def child_burn(seconds=0.3):
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        for _ in range(1000):
            n += 1
    return n


child_burn(0.2)
pid = os.fork()
if pid == 0:
    data = os.urandom(128 << 20)
    n = len(data) + child_burn()
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open("child_cpu.txt", "w") as f:
        f.write("%.6f\n" % (r.ru_utime + r.ru_stime))
    os._exit(0 if n >= 0 else 1)
os.waitpid(pid, 0)
with open("pids.txt", "w") as f:
    f.write("%d\n" % pid)
