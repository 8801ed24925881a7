"""A scriptable ingest server for upload fault tests: it answers any POST (/ingest, Pyroscope's
Push, OTLP profiles) according to a mode and records every profile it accepted, decoded by
pyroscope.py, so that a test can check that no sample was lost or doubled.

Modes: ok; fail5xx:N (the first N requests get 503); reject413; reset:N (the first N
connections are closed without an answer); slow:S (answers after S seconds); slowfirst:S (the
first request, body read, is answered after S seconds, the others at once); flap:SEED (a
seeded coin decides per request between 200, 503 and a reset, before reading the body)."""
import http.server
import random
import socket
import threading
import time
import urllib.parse

from pyroscope import request_labels, request_stacks


class BadServer:
    def __init__(self, mode="ok", port=0, tls=None):
        self.mode = mode
        self.accepted = []  # (query dict, body bytes, headers, path)
        self.requests = 0
        self.slow_answered = 0  # slow: requests whose delayed answer was sent
        self.lock = threading.Lock()
        parent = self
        kind, _, arg = mode.partition(":")
        rng = random.Random(int(arg) if kind == "flap" and arg else 1)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                with parent.lock:
                    parent.requests += 1
                    n = parent.requests
                    action = "ok"
                    if kind == "fail5xx" and n <= int(arg):
                        action = "503"
                    elif kind == "reject413":
                        action = "413"
                    elif kind == "reset" and n <= int(arg):
                        action = "reset"
                    elif kind == "slow" or (kind == "slowfirst" and n == 1):
                        action = "slow"
                    elif kind == "flap":
                        action = rng.choice(["ok", "503", "reset"])
                if action == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                    self.close_connection = True
                    return
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if action == "slow":
                    time.sleep(float(arg))
                    with parent.lock:
                        parent.slow_answered += 1
                if action in ("503", "413"):
                    msg = b"go away\n"
                    self.send_response(int(action))
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                url = urllib.parse.urlparse(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                with parent.lock:
                    parent.accepted.append((q, body, dict(self.headers), url.path))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.scheme = "http"
        if tls:  # (certfile, keyfile): serve HTTPS
            import ssl
            sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            sctx.load_cert_chain(*tls)
            self.httpd.socket = sctx.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def stacks(self):
        """Sum of the accepted profiles: {stack: count}."""
        out = {}
        with self.lock:
            for q, body, _, path in self.accepted:
                for k, v in request_stacks(path, q, body).items():
                    out[k] = out.get(k, 0) + v
        return out

    def labels(self, i):
        """The series labels of accepted upload i, service_name included."""
        q, body, _, path = self.accepted[i]
        return request_labels(path, q, body)
