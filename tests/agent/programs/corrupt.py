"""Garbage in a live code object's line table (written with ctypes while the function runs):
the profiler must not crash, whatever it reads."""
import ctypes
import sys
import time


def victim():
    x = 0
    end = time.thread_time() + 1.5
    while time.thread_time() < end:
        x += 1
    return x


code = victim.__code__
table = code.co_linetable if hasattr(code, "co_linetable") else code.co_lnotab
# The bytes object's data starts where an empty bytes object's size ends, minus its NUL.
offset = sys.getsizeof(b"") - 1
saved = bytes(table)
garbage = bytes((i * 37 + 11) & 0xFF for i in range(len(table)))
ctypes.memmove(id(table) + offset, garbage, len(table))
try:
    victim()
finally:
    ctypes.memmove(id(table) + offset, saved, len(table))
print("corrupt done")
