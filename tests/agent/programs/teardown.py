"""A program whose interpreter finalization is long: a large tree of objects held by a module
global is freed at shutdown, after main_burn() ran."""
import sys
import time

# A debug build (sys.gettotalrefcount exists) frees each object several times slower: a
# quarter of the tree still makes finalization most of the run, in a quarter of the time.
ITEMS = 15000 if hasattr(sys, "gettotalrefcount") else 60000


def build():
    return [{"k%d" % j: [j, str(j), (j, j)] for j in range(40)} for _ in range(ITEMS)]


def main_burn(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


TREE = build()
main_burn(0.5)
