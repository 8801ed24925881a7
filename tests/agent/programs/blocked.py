"""Two threads that block every signal, SIGPROF included, as Apache's worker threads do (APR),
burn CPU with a known split, accuracy.py's: in turns spin_a (random lengths, mean 3 ms) and
spin_b (mean 7 ms), each measured with time.thread_time(), until the thread has used argv[2]
seconds (and the wall time that took).
Blocked-1 blocks the signals itself (pthread_sigmask); Blocked-2 is born with them blocked
(the mask it inherits from the main thread, which blocks them only to start it). Each then
looks at its pending signals: a timer signal meant for a thread that blocks it would wait
there. The truth goes to the JSON file named by argv[1]."""
import json
import signal
import sys
import threading
import time

from accuracy import main_work

truth = {}


def status():
    """This thread's own pending signals and the process's, as the kernel says them."""
    path = "/proc/self/task/%d/status" % threading.get_native_id()
    return {k: v.strip() for k, v in (l.split(":", 1) for l in open(path)) if k in ("SigPnd", "ShdPnd")}


def work(block_here):
    if block_here:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    start = time.monotonic()
    mine = {}
    main_work(mine, time.thread_time)
    wall = time.monotonic() - start
    name = threading.current_thread().name
    truth[name] = {
        "spin_a": mine["spin_a"],
        "spin_b": mine["spin_b"],
        "wall": wall,
        "blocked": signal.SIGPROF in signal.pthread_sigmask(signal.SIG_BLOCK, []),
        "pending": sorted(signal.Signals(s).name for s in signal.sigpending()),
        "status": status(),
    }
    # Last: the thread's CPU time includes what the lines above take (on a debug build under
    # load, an import among them took 50-100 ms, which the profile rightly counts).
    truth[name]["thread_cpu"] = time.thread_time()


first = threading.Thread(target=work, args=(True,), name="Blocked-1")
first.start()
old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
second = threading.Thread(target=work, args=(False,), name="Blocked-2")
second.start()
signal.pthread_sigmask(signal.SIG_SETMASK, old)
first.join()
second.join()
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
