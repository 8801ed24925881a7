"""Helpers shared by the harmless cases (not a case: the runner skips _*.py)."""
import ctypes
import os
import signal
import subprocess
import sys
import time


SETUP_FAILED = 99  # run.py: the case could not run


def helper(name, keep_gil=False):
    """The C helper NAME.so (tests/harmless/helpers/NAME.c) from PA_HARMLESS_HELPERS, loaded
    with ctypes (PyDLL with keep_gil: its calls keep the GIL); exits with SETUP_FAILED if it is
    not there."""
    path = os.path.join(os.environ.get("PA_HARMLESS_HELPERS", ""), name + ".so")
    try:
        return (ctypes.PyDLL if keep_gil else ctypes.CDLL)(path)
    except OSError as e:
        print("no helper %s.so in PA_HARMLESS_HELPERS: %s" % (name, e), file=sys.stderr)
        sys.exit(SETUP_FAILED)


def burn(seconds):
    """Spends CPU time (thread CPU clock) so that a profiler's timers fire meanwhile."""
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def status(code):
    """A subprocess return code as words: signals by name, never a number that varies."""
    if code < 0:
        return "killed by " + signal.Signals(-code).name
    return "exit status %d" % code


def child(source, *args, **kw):
    """Runs a Python child (which inherits the environment, the agent included) and returns
    (status words, stdout, stderr)."""
    try:
        r = subprocess.run([sys.executable, "-c", source] + list(args), capture_output=True,
                           text=True, **kw)
    except subprocess.TimeoutExpired as e:
        return "still running after %g s (killed)" % e.timeout, "", ""
    return status(r.returncode), r.stdout, r.stderr


def report(what, result):
    st, out, err = result
    print("%s: %s" % (what, st))
    for line in out.splitlines():
        print("  out: " + line)
    for line in err.splitlines():
        print("  err: " + line)


class FdZero:
    """Harm 12's loop, counted: the program closes descriptor 0 (close_zero) and takes it back
    (take_back): open() must then return 0, the lowest free number (POSIX), and dup2 of the
    saved descriptor onto 0 must not fail with EBUSY. A descriptor of anyone else's in the
    program's table, even for a moment, shows in one count or the other."""

    def __init__(self):
        self.saved = os.dup(0)
        self.n = self.wrong = self.busy = self.gone = 0

    def close_zero(self):
        try:
            os.close(0)
        except OSError:
            self.gone += 1  # someone closed the program's descriptor 0 (and not the program)

    def take_back(self):
        fd = os.open(os.devnull, os.O_RDONLY)
        os.close(fd)
        self.wrong += fd != 0
        for _ in range(1000):
            try:
                os.dup2(self.saved, 0)
                break
            except OSError:
                self.busy += 1
        self.n += 1

    def report(self):
        print("iterations:", self.n > 1000)
        print("open() after close(0) that did not return 0:", self.wrong)
        print("dup2 onto 0 that failed (EBUSY):", self.busy)
        print("descriptor 0 found closed by someone else:", self.gone)
