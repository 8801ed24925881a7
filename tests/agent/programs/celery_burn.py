"""A Celery application (broker and results in the Redis at $BURN_REDIS) whose task burn()
spends 20 ms of CPU in app_burn() and returns its worker's pid and CPU time so far.

    python3 celery_burn.py N OUT    sends N tasks, waits for them, writes to OUT each
                                    worker's pid and the largest CPU time it reported"""
import os
import sys
import time

from celery import Celery

from wsgi_burn import app_burn

app = Celery("celery_burn", broker=os.environ["BURN_REDIS"], backend=os.environ["BURN_REDIS"])


@app.task
def burn():
    app_burn()
    return os.getpid(), time.process_time()


if __name__ == "__main__":
    results = [burn.delay() for _ in range(int(sys.argv[1]))]
    cpu = {}
    for r in results:
        pid, t = r.get(timeout=120)
        cpu[pid] = max(cpu.get(pid, 0.0), t)
    with open(sys.argv[2], "w") as f:
        for pid, t in sorted(cpu.items()):
            f.write("%d %.6f\n" % (pid, t))
