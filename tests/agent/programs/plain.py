"""A small program that does some CPU work and prints a deterministic result."""
import sys
import time


def work():
    end = time.thread_time() + float(sys.argv[1] if len(sys.argv) > 1 else 1.0)
    n = 0
    while time.thread_time() < end:
        n += sum(range(1000))
    return n


work()
print("plain done")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
