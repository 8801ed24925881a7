"""A thread that blocks SIGPROF and whose stack never stands still: Churner calls two tiny
functions in turn, leaf_a only from the line marked CALL A and leaf_b only from the line marked
CALL B, until it has used argv[2] seconds of CPU. Its stack changes every few hundred
nanoseconds, faster than a read of its frame chain, so a read made while it runs can mix two
moments; no true stack has leaf_a under the CALL B line or leaf_b under CALL A. Writes its
thread_time to the JSON file named by argv[1]."""
import json
import signal
import sys
import threading
import time

SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
truth = {}


def leaf_a(x):
    return x + 1


def leaf_b(x):
    return x - 1


def churn():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    x = 0
    while time.thread_time() < SECONDS:
        for _ in range(1000):
            x = leaf_a(x)  # CALL A
            x = leaf_b(x)  # CALL B
    truth["thread_cpu"] = time.thread_time()
    truth["pending"] = sorted(signal.Signals(s).name for s in signal.sigpending())


t = threading.Thread(target=churn, name="Churner")
t.start()
t.join()
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
