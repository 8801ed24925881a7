"""The C library's random() sequence is the program's: a C extension that draws from it
without seeding gets glibc's fixed default sequence, and one that seeds it with srandom() gets
the same numbers whether or not the agent arms timers for the threads the program starts
meanwhile. glibc's random() and rand() share one hidden state, so a profiler that seeded it
at start or drew from it (say, to spread its threads' first samples) would change every later
number. Draws unseeded, then seeds, starts and joins threads that burn CPU, and prints the
draws."""
import ctypes
import threading

from _util import burn

libc = ctypes.CDLL(None)
libc.random.restype = ctypes.c_long


def worker():
    burn(0.05)


draws = [[libc.random() for _ in range(3)] + [libc.rand()]]
burn(0.05)
libc.srandom(1234)
for round_ in range(3):
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    draws.append([libc.random() for _ in range(3)] + [libc.rand()])
for round_, d in enumerate(draws):
    print("round %d: %s" % (round_, " ".join(str(x) for x in d)))
