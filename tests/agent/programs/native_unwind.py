"""Native unwinding on the stacks test_agent.py native_unwind checks: deep C recursion through
a helper library, a ctypes callback into Python at its bottom, libc's qsort calling a Python
comparator, numpy where it is installed, and the helper unloaded (dlclose) and its other
variant loaded, most likely at the same address. Prints one line per phase.

    native_unwind.py HELPER_A.so HELPER_B.so"""
import ctypes
import sys
import time

import _ctypes

CB = ctypes.CFUNCTYPE(ctypes.c_ulong, ctypes.c_ulong)


def load(path):
    lib = ctypes.CDLL(path)
    lib.helper_recurse.restype = ctypes.c_ulong
    lib.helper_recurse.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    return lib


def for_a_while(seconds, step):
    end = time.process_time() + seconds
    while time.process_time() < end:
        step()


def python_work(n):
    s = 0
    for i in range(n // 50):
        s += i * i
    return s & 0xFFFF


def spin_in_c(lib):
    for_a_while(0.6, lambda: lib.helper_recurse(60, 200000, None))


def callback(lib):
    cb = CB(python_work)
    for_a_while(0.6, lambda: lib.helper_recurse(40, 200000, ctypes.cast(cb, ctypes.c_void_p)))


def qsort_python_comparator():
    libc = ctypes.CDLL(None)
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
    cmp = cmp_t(lambda a, b: (a[0] > b[0]) - (a[0] < b[0]))
    values = list(range(3000, 0, -1))

    def step():
        arr = (ctypes.c_int * len(values))(*values)
        libc.qsort(arr, len(values), ctypes.sizeof(ctypes.c_int), cmp)
    for_a_while(0.6, step)


def numpy_work():
    try:
        import numpy as np
    except ImportError:
        print("numpy: not installed")
        return
    rng = np.random.default_rng(1)
    a = rng.standard_normal((150, 150))
    for_a_while(0.8, lambda: (a @ a.T, np.fft.rfft(rng.standard_normal(1 << 14)), np.sort(rng.standard_normal(50000))))
    print("numpy: done")


def main():
    path_a, path_b = sys.argv[1], sys.argv[2]
    lib = load(path_a)
    base_a = ctypes.cast(lib.helper_spin, ctypes.c_void_p).value
    spin_in_c(lib)
    print("helper: spun")
    callback(lib)
    print("callback: done")
    qsort_python_comparator()
    print("qsort: done")
    numpy_work()
    # Unload variant A, load variant B: the same functions, other unwind rules.
    handle = lib._handle
    del lib
    _ctypes.dlclose(handle)
    lib = load(path_b)
    base_b = ctypes.cast(lib.helper_spin, ctypes.c_void_p).value
    print("reloaded: same address" if base_a == base_b else "reloaded: another address")
    spin_in_c(lib)
    callback(lib)
    print("helper b: spun")


main()
