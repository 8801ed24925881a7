"""A WSGI application whose every request burns 20 ms of CPU in app_burn() (uWSGI test)."""
import time


def app_burn():
    end = time.thread_time() + 0.02
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def application(environ, start_response):
    app_burn()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok\n"]
