"""CPU work for the test programs: burn_for(seconds) uses that much of the calling thread's
CPU time in plain arithmetic. Between clock reads, since time.thread_time() is a system call:
a loop of nothing but clock reads would be kernel time, which a perf event's samples count at
the next overflow in user mode."""
import time


def burn_for(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i
    return x
