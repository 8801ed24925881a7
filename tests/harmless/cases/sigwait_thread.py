"""Harm 5: a thread that blocks every signal and takes them with sigwait/sigtimedwait must only
ever get the signals sent to it, never a profiler's SIGPROF (blocked signals are still taken
by sigwait, so no timer may target such a thread at all)."""
import signal
import threading

from _util import burn

received = []
ready = threading.Event()


def waiter():
    signal.pthread_sigmask(signal.SIG_BLOCK, range(1, signal.NSIG))
    ready.set()
    for _ in range(20):
        burn(0.01)  # CPU time: a CPU timer on this thread would fire
        info = signal.sigtimedwait(range(1, signal.NSIG), 0.005)  # wall time
        if info:
            received.append(signal.Signals(info.si_signo).name)
            if info.si_signo == signal.SIGUSR1:
                break


t = threading.Thread(target=waiter)
t.start()
ready.wait()
burn(0.1)
signal.pthread_kill(t.ident, signal.SIGUSR1)
t.join()
print("the sigwait thread received:", received)
