# harmless: timeout=60
"""test_concurrent_futures' test_process_fork_from_a_threadpool after other tests (sid 3.15's
full suite, 2026-11-26): short-lived threads end, a new thread takes over a dead one's thread
handle (glibc reuses the thread descriptor and its stack), and that thread forks. The child's
exit must be an ordinary exit (status 0), not an abort on a corrupted heap. Under the agent,
the child kept the dead thread's record as its own and freed the live one, which the thread
still used ("corrupted size vs. prev_size", SIGABRT at exit)."""
import multiprocessing
import os
import threading
import warnings

from _util import burn

warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks",
                        category=DeprecationWarning)


def short():
    burn(0.002)


# Threads that start and end four at a time: new ones get the handles of dead ones, whose
# records wait for the agent's next drain.
for _ in range(5):
    threads = [threading.Thread(target=short) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

result = []


def child():
    burn(0.02)


def worker():
    # multiprocessing's fork start method: the child runs Python (its bootstrap) and samples,
    # then leaves with os._exit.
    p = multiprocessing.get_context("fork").Process(target=child)
    p.start()
    p.join()
    result.append(p.exitcode)


for _ in range(3):
    t = threading.Thread(target=worker)
    t.start()
    t.join()
print("children's exit codes:", result)
