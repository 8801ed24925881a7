"""Harm 12 (descriptors), while the agent sets up timers: threads start and end, and block and
unblock SIGPROF (which stops and starts their timer), while the main thread closes descriptor 0
and takes it back (close(0) then open() must give 0; dup2 onto it must not fail with EBUSY). A
perf-event timer set up in the program's descriptor table, even for microseconds, takes the
lowest free number, 0 here: the program's open() then gets another number. Run in every mode,
perf events (cpu-perf, wall, native) included."""
import os
import signal
import threading
import time

stop = threading.Event()


def churn():
    """Short threads, each blocking and unblocking SIGPROF a few times while it works."""
    while not stop.is_set():
        def work():
            for _ in range(3):
                sum(range(2000))
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
                sum(range(500))
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPROF})
        t = threading.Thread(target=work)
        t.start()
        t.join()


# The first thread to end makes the C library load libgcc_s (pthread_exit unwinds; Python 3.8
# and 3.9 end their threads with it), an open() in the program's table: without the agent
# (whose library already links libgcc_s) that open() could take descriptor 0 inside the loop
# below, or lose its own descriptor to the loop's close(0): CI failed this case once on 3.8, and
# 300 runs of this loop for 50 ms under 3.8 without the agent ended once with "libgcc_s.so.1
# must be installed for pthread_exit to work" (SIGABRT). One thread started and ended first
# loads it before the loop, in both runs.
warm = threading.Thread(target=lambda: None)
warm.start()
warm.join()
churners = [threading.Thread(target=churn) for _ in range(2)]
for t in churners:
    t.start()
saved = os.dup(0)
n = wrong = busy = gone = 0
end = time.monotonic() + 4
try:
    while time.monotonic() < end:
        try:
            os.close(0)
        except OSError:
            gone += 1
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 0:
            wrong += 1
        os.close(fd)
        for _ in range(1000):
            try:
                os.dup2(saved, 0)
                break
            except OSError:
                busy += 1
        n += 1
finally:
    stop.set()
    for t in churners:
        t.join()
print("iterations:", n > 1000)
print("open() after close(0) that did not return 0:", wrong)
print("dup2 onto 0 that failed (EBUSY):", busy)
print("descriptor 0 found closed by someone else:", gone)
