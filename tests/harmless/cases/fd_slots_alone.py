"""Harm 12 (descriptors) in a program that never starts a thread. While a process has a single
thread the agent makes each perf event in the process itself rather than in a helper process
(docs/architecture.md, "Start-up cost"): the descriptor exists only between two of the agent's
own system calls, with every signal blocked. Here the only thread closes descriptor 0, then
unblocks SIGPROF (which makes its timer's event again), then opens a file, again and again:
open() must return 0 each time, as without the agent, and dup2 onto 0 must never fail. Its
CPU-bound work between the steps gets sampled, so the events are live. Run in every mode."""
import signal
import threading
import time

from _util import FdZero

fd0 = FdZero()
end = time.monotonic() + 3
while time.monotonic() < end:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    fd0.close_zero()
    sum(range(3000))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPROF})
    sum(range(3000))
    fd0.take_back()
fd0.report()
print("threads seen by the program:", threading.active_count())
