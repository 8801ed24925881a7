"""Work done 40 frames deep."""
import sys


def level(n, k):
    if n == 0:
        s = 0
        for i in range(k):
            s += i % 7
        return s
    return level(n - 1, k)


def run():
    t = 0
    for _ in range(4000):
        t += level(40, 400)
    print(t)


# The bench repeats the work (argv[1]) so that it lasts a few CPU-seconds.
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    run()
