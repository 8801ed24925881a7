# harmless: modes=native timeout=60
"""Harm 10: a program that closes every descriptor and then opens its own files must find
them as it left them. The native unwinder must not read from, write to or close descriptors
it once opened (libunwind's address-validation pipe), whose numbers now belong to the
program. (POSIX timers, which need no descriptor: closing every descriptor would end a
perf-event timer, and with it the unwinding.)"""
import os
import shutil
import tempfile
import time


def deep(n):
    # Each level goes through C (map), so the C stack the unwinder reads spans many pages:
    # libunwind validated every page it had not seen lately.
    return n if n == 0 else list(map(deep, [n - 1]))[0]


def busy(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        for n in (5, 40, 80, 120):
            deep(n)


work = tempfile.mkdtemp(prefix="harmless-native-")
try:
    data = os.path.join(work, "data")
    with open(data, "wb") as f:
        f.write(b"0123456789" * 1000)
    busy(0.5)                         # native stacks unwound: the unwinder is set up
    os.closerange(3, 4096)
    fds = []
    for i in range(8):                # the low numbers again, alternately read and write ends
        if i % 2 == 0:
            fds.append(("read", os.open(data, os.O_RDONLY)))
        else:
            fds.append(("write", os.open(os.path.join(work, "out%d" % i),
                                         os.O_WRONLY | os.O_CREAT, 0o644)))
    busy(1.0)                         # more native stacks
    for i, (kind, fd) in enumerate(fds):
        try:
            pos = os.lseek(fd, 0, os.SEEK_CUR)
            size = os.fstat(fd).st_size
            print(i, kind, "open, offset", pos, "size", size)
        except OSError as e:
            print(i, kind, "gone:", e.strerror)
finally:
    shutil.rmtree(work)
