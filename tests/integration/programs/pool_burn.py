"""A ProcessPoolExecutor of 2 workers (start method from argv[1]) runs 80 tasks of 20 ms of CPU
each in app_burn(); every task returns its worker's pid and CPU time so far. Writes
pids.txt: the main pid, then each worker's pid and the largest CPU time it reported."""
import concurrent.futures
import multiprocessing
import os
import sys
import time

from wsgi_burn import app_burn


def pool_burn():
    app_burn()
    return os.getpid(), time.process_time()


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    cpu = {}
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as ex:
        futures = [ex.submit(pool_burn) for _ in range(80)]
        for f in futures:
            pid, t = f.result()
            cpu[pid] = max(cpu.get(pid, 0.0), t)
    with open("pids.txt", "w") as f:
        f.write("%d\n" % os.getpid())
        for pid, t in sorted(cpu.items()):
            f.write("%d %.6f\n" % (pid, t))
