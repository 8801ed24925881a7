"""A program whose interpreter finalization is long: a large tree of objects held by a module
global is freed at shutdown, after main_burn() ran."""
import time


def build():
    return [{"k%d" % j: [j, str(j), (j, j)] for j in range(40)} for _ in range(60000)]


def main_burn(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


TREE = build()
main_burn(0.5)
