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
