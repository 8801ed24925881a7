#!/usr/bin/env python3
"""What uploading costs a program at fork and at exit when the server misbehaves.

For each library given (name=path; `none` runs without the agent) a Python program burns
0.3 s of CPU, prints a line and exits; the time from that line to the end of the process is
its exit. Servers: none (a local file only), a refused port, and a black hole (a socket that
listens and never accepts: the kernel completes the handshake, nobody answers). Then a
program forks while its upload to the black hole hangs; the time fork() takes is printed.
Runs are interleaved; medians and maxima. Goals (issue 10): exit +0 without a server, at
most +50 ms when refused, at most the exit deadline (PYAGENT_EXIT_TIMEOUT_MS, 1 s) for a
black hole; fork never waits for an upload.

    bench/exit_upload.py --python /usr/bin/python3.11 --runs 5 \\
        main=/path/to/main/libpyagent.so head=build/release/lib/libpyagent.so
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

BURN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 0.3: pass\nprint('x', flush=True)\n"
FORK = r"""
import os, time
t = time.monotonic()
while time.monotonic() - t < 0.4:
    pass
time.sleep(1.6)
t = time.monotonic()
pid = os.fork()
took = time.monotonic() - t
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("%.1f" % (took * 1000))
"""


def env_for(lib, server, work):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    env.update(PYAGENT_OUTPUT=os.path.join(work, "p.%p.folded"), PYAGENT_LOG="error",
               PYAGENT_SPOOL_DIR=os.path.join(work, "spool"), PYAGENT_UPLOAD_INTERVAL="1")
    if lib:
        env["LD_PRELOAD"] = lib
    if server:
        env["PYAGENT_SERVER"] = server
    return env


def exit_ms(python, env):
    p = subprocess.Popen([python, "-c", BURN], env=env, stdout=subprocess.PIPE)
    p.stdout.readline()
    t = time.perf_counter()
    p.wait()
    return (time.perf_counter() - t) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("libs", nargs="+", help="name=path to libpyagent.so")
    a = ap.parse_args()
    libs = [("none", None)] + [tuple(x.split("=", 1)) for x in a.libs]
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)
    gone = socket.socket()
    gone.bind(("127.0.0.1", 0))
    refused = "http://127.0.0.1:%d" % gone.getsockname()[1]
    gone.close()
    servers = [("no server", None), ("refused", refused),
               ("black hole", "http://127.0.0.1:%d" % hole.getsockname()[1])]
    work = tempfile.mkdtemp(prefix="pyagent-exit-")
    try:
        res = {}
        for _ in range(a.runs):
            for sname, server in servers:
                for lname, lib in libs:
                    if lib is None and server:
                        continue
                    res.setdefault((sname, lname), []).append(exit_ms(a.python, env_for(lib, server, work)))
        print("exit after the program's last line (ms), %d runs" % a.runs)
        for (sname, lname), v in res.items():
            print("  %-10s %-6s median %8.1f  max %8.1f" % (sname, lname, statistics.median(v), max(v)))
        print("fork() while an upload to the black hole hangs (ms)")
        for lname, lib in libs[1:]:
            env = env_for(lib, servers[2][1], work)
            v = [float(subprocess.run([a.python, "-c", FORK], env=env, stdout=subprocess.PIPE,
                                      text=True, timeout=120).stdout) for _ in range(a.runs)]
            print("  %-6s median %8.1f  max %8.1f" % (lname, statistics.median(v), max(v)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
