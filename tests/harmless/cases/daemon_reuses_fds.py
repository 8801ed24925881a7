# harmless: timeout=90
"""Harm 9: a daemon that closes every descriptor and opens its own sockets must never receive
the agent's HTTP request on them (an HTTP library that caches its connection would write into
whatever now has that descriptor number). A child Python uploads every second to a small
server run here (PYAGENT_SERVER means nothing without the agent), closes all descriptors, makes
socket pairs, and reports whether anything arrived on them."""
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading

CHILD = r"""
import os, socket, time
def busy(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        pass
busy(0.4)
time.sleep(1.8)                       # uploaded at least once: a connection may be cached
os.closerange(3, 4096)
pairs = [socket.socketpair() for _ in range(6)]
busy(0.4)
time.sleep(2.2)                       # more uploads
got = 0
for a, b in pairs:
    for s in (a, b):
        s.setblocking(False)
        try:
            got += len(s.recv(65536))
        except BlockingIOError:
            pass
print("bytes that arrived on the program's own sockets:", got)
"""


class Ingest(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"     # keep-alive: the client may reuse the connection

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


work = tempfile.mkdtemp(prefix="harmless-daemon-")
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ingest)
threading.Thread(target=server.serve_forever, daemon=True).start()
try:
    env = dict(os.environ, PYAGENT_SERVER="http://127.0.0.1:%d" % server.server_address[1],
               PYAGENT_UPLOAD_INTERVAL="1", PYAGENT_SPOOL_DIR=os.path.join(work, "spool"),
               PYAGENT_LOG="error")
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                       text=True, timeout=60)
    print(r.stdout.strip(), "| exit", r.returncode)
finally:
    server.shutdown()
    shutil.rmtree(work)
