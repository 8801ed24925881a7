# harmless: timeout=90
"""Harm 8: a server that accepts and never answers, or refuses connections, must not slow the
program down. A child Python uploads to such a server (PYAGENT_SERVER; it means nothing
without the agent); it forks while an upload hangs, and exits. fork() must not wait for the
upload, and exit must not wait longer than the exit deadline, or at all when the connection is
refused. The deadlines are set so that each harm would cost tens of seconds (an upload that
waits 30 s for the server, an exit deadline of 30 s where refusal must end the exit at once),
and the bounds sit far from both sides: far above what a loaded machine needs without the
agent, far below what the harm costs."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import os, sys, time
t = time.monotonic()
while time.monotonic() - t < 0.4:
    pass
time.sleep(1.6)                      # an upload is now in flight (interval 1 s)
t = time.monotonic()
pid = os.fork()
took = time.monotonic() - t
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("fork took less than 5 s:", took < 5, flush=True)
"""


def run(server, work, bound, exit_ms):
    env = dict(os.environ, PYAGENT_SERVER=server, PYAGENT_UPLOAD_INTERVAL="1",
               PYAGENT_SPOOL_DIR=os.path.join(work, "spool"), PYAGENT_LOG="error",
               PYAGENT_UPLOAD_TIMEOUT_MS="30000", PYAGENT_EXIT_TIMEOUT_MS=exit_ms)
    p = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    t = time.monotonic()
    p.stdout.read()
    rc = p.wait(timeout=60)
    return line, rc, time.monotonic() - t < bound


work = tempfile.mkdtemp(prefix="harmless-stall-")
try:
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)                   # the kernel completes handshakes; nobody answers
    # Exit deadline 3 s: the exit ends by it (not after the 30 s upload time-out).
    line, rc, quick = run("http://127.0.0.1:%d" % hole.getsockname()[1], work, 15, "3000")
    print("black hole:", line, "| exit", rc, "| exited within 15 s:", quick)
    gone = socket.socket()
    gone.bind(("127.0.0.1", 0))
    port = gone.getsockname()[1]
    gone.close()                      # nothing listens: connections are refused
    # Exit deadline 30 s: a refused connection ends the exit's upload at once.
    line, rc, quick = run("http://127.0.0.1:%d" % port, work, 10, "30000")
    print("refused:", line, "| exit", rc, "| exited within 10 s:", quick)
    hole.close()
finally:
    shutil.rmtree(work)
