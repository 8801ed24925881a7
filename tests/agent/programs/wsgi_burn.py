"""A WSGI application whose every request burns 20 ms of CPU in app_burn() (uWSGI, gunicorn
and Apache tests). The thread's clock is read every 1000 steps: mostly user time, as Python
code is, rather than the clock's own system calls."""
import time


def app_burn(seconds=0.02):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        for _ in range(1000):
            n += 1
    return n


def application(environ, start_response):
    app_burn()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok\n"]
