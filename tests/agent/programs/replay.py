"""Two threads busy at once, then one sleeping while the other works: a profile with two
thread roots, time buckets over a second or so, and in wall mode idle samples too (for the
binary capture's replay test).

    python replay.py"""
import threading
import time


def spin(cpu):
    n, until = 0, time.thread_time() + cpu
    while time.thread_time() < until:
        n += sum(i * i for i in range(200))
    return n


def worker():
    spin(0.3)
    time.sleep(0.2)


t = threading.Thread(target=worker, name="worker")
t.start()
spin(0.5)
t.join()
