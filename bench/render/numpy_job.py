"""A numpy job for the side-by-side comparison (sidebyside.sh): matrix products, FFTs and a
Python-level reduction loop, for SECONDS (argv[1], default 6)."""
import sys
import time

import numpy as np

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0


def products(rng):
    a = rng.standard_normal((300, 300))
    return float((a @ a.T).trace())


def spectra(rng):
    return float(np.abs(np.fft.rfft(rng.standard_normal(1 << 16))).max())


def python_loop(rng):
    total = 0.0
    for x in rng.standard_normal(20000):
        total += x * x
    return total


rng = np.random.default_rng(1)
end = time.monotonic() + SECONDS
n = 0
while time.monotonic() < end:
    products(rng)
    spectra(rng)
    python_loop(rng)
    n += 1
print("rounds", n)
