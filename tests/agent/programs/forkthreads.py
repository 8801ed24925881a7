"""Threads and fork together, small enough to run under every mode: four threads work, a
forked child starts threads of its own and exits with a status, a multiprocessing child
(fork) returns a result. Deterministic stdout; the pids of Python processes go to argv[1]."""
import multiprocessing as mp
import os
import sys
import threading
import time


def burn(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def team(n, seconds):
    ts = [threading.Thread(target=burn, args=(seconds,), name="team-%d" % i) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def square(q, x):
    burn(0.1)
    q.put(x * x)


if __name__ == "__main__":
    pids = [os.getpid()]
    team(4, 0.15)
    pid = os.fork()
    if pid == 0:
        team(2, 0.1)
        time.sleep(0.05)
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    pids.append(pid)
    print("fork child status", os.WEXITSTATUS(status) if os.WIFEXITED(status) else "signal")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=square, args=(q, 7))
    p.start()
    print("mp result", q.get())
    p.join()
    pids.append(p.pid)
    print("mp exit", p.exitcode)
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(map(str, pids)))
    print("forkthreads done")
