"""A small CPU-bound program for the deployment examples: two threads with a known split."""
import hashlib
import threading
import time


def hashing(seconds):
    end = time.time() + seconds
    data = b"x" * 4096
    while time.time() < end:
        data = hashlib.sha256(data).digest() * 128


def arithmetic(seconds):
    end = time.time() + seconds
    total = 0
    while time.time() < end:
        total += sum(i * i for i in range(1000))


while True:
    workers = [threading.Thread(target=hashing, args=(10,), name="hasher"),
               threading.Thread(target=arithmetic, args=(10,), name="adder")]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
