"""Spins at a given stack depth (argv[1]) for argv[2] CPU seconds: the handler's cost per
depth is read from the profile header. labelled.py imports level()."""
import sys
import time


def level(n, seconds):
    if n <= 1:
        end = time.thread_time() + seconds
        x = 0
        while time.thread_time() < end:
            x += 1
        return x
    return level(n - 1, seconds)


if __name__ == "__main__":
    depth = int(sys.argv[1])
    sys.setrecursionlimit(depth + 100)
    # The module frame counts as one.
    level(depth - 1, float(sys.argv[2]))
