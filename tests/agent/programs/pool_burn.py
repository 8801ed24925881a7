"""A pool of 2 worker processes (start method from argv[1]) runs 80 tasks of 20 ms of CPU each
in app_burn(); every task returns its worker's pid and CPU time so far. argv[2] picks the
pool: `executor` (concurrent.futures.ProcessPoolExecutor, the default) or `pool`
(multiprocessing's `with Pool(2) as p: p.map(...)`, the documented idiom, whose exit
terminates the workers with SIGTERM). Writes pids.txt: the main pid, then each worker's pid
and the largest CPU time it reported."""
import concurrent.futures
import multiprocessing
import os
import sys
import time

from wsgi_burn import app_burn


def pool_burn():
    app_burn()
    return os.getpid(), time.process_time()


def pool_task(_):
    return pool_burn()


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    cpu = {}
    if len(sys.argv) > 2 and sys.argv[2] == "pool":
        with ctx.Pool(2) as p:
            results = p.map(pool_task, range(80), chunksize=1)
    else:
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as ex:
            results = [f.result() for f in [ex.submit(pool_burn) for _ in range(80)]]
    for pid, t in results:
        cpu[pid] = max(cpu.get(pid, 0.0), t)
    with open("pids.txt", "w") as f:
        f.write("%d\n" % os.getpid())
        for pid, t in sorted(cpu.items()):
            f.write("%d %.6f\n" % (pid, t))
