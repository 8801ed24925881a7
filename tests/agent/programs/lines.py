"""The hot line of a function must be the line reported."""
import time


def work():
    total = 0
    for i in range(200):
        total += i  # COLD
    total += sum(i * i for i in range(300000))  # HOT
    return total


end = time.thread_time() + 2.0
while time.thread_time() < end:
    work()
print("lines done")
