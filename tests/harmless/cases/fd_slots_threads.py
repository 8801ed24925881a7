"""Harm 12 (descriptors), while the agent sets up timers: threads start and end, and block and
unblock SIGPROF (which stops and starts their timer), while the main thread closes descriptor 0
and takes it back (close(0) then open() must give 0; dup2 onto it must not fail with EBUSY). A
perf-event timer set up in the program's descriptor table, even for microseconds, takes the
lowest free number, 0 here: the program's open() then gets another number. Run in every mode,
perf events (cpu-perf, wall, native) included."""
import signal
import threading
import time

from _util import FdZero

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


# Two things the C library does once per process, each an open() in the program's table from
# whichever thread gets there first, are made to happen here, before the loop, in both runs:
# - The first thread to end makes glibc load libgcc_s (pthread_exit unwinds; Python 3.8 and 3.9
#   end their threads with it). CI failed this case once on 3.8 without the agent, and 300 runs
#   of this loop for 50 ms under 3.8 without the agent ended once with "libgcc_s.so.1 must be
#   installed for pthread_exit to work" (SIGABRT).
# - When a thread needs a malloc arena while more than 8 exist, glibc (2.35+) reads
#   /sys/devices/system/cpu/online to set its arena limit. Each thread that calls malloc gets an
#   arena of its own; the agent's two threads hold one each, so with the agent the churn below
#   crossed that line during the loop (kernel tracing caught the open() in a churn worker: 3 runs
#   in 315 under load, "dup2 onto 0 that failed (EBUSY): 1" and "open() after close(0) that did
#   not return 0: 1"), without it later or never. 16 threads alive at once cross it here.
gate = threading.Barrier(17)
warm = [threading.Thread(target=gate.wait) for _ in range(16)]
for t in warm:
    t.start()
gate.wait()
for t in warm:
    t.join()
churners = [threading.Thread(target=churn) for _ in range(2)]
for t in churners:
    t.start()
fd0 = FdZero()
end = time.monotonic() + 4
try:
    while time.monotonic() < end:
        fd0.close_zero()
        fd0.take_back()
finally:
    stop.set()
    for t in churners:
        t.join()
fd0.report()
