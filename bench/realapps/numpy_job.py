"""The numpy workload of the real-application benchmark (run.py): a fixed amount of work
(ROUNDS = argv[1]) mixing what numpy programs do: BLAS matrix products, FFTs, sorting and
reductions on large arrays (time in C libraries: native frames matter), and many small
array operations driven from Python (time in the interpreter and numpy's dispatch)."""
import sys

import numpy as np

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def products(rng):
    a = rng.standard_normal((200, 200))
    return float(np.linalg.norm(a @ a.T))


def spectra(rng):
    return float(np.abs(np.fft.rfft(rng.standard_normal(1 << 15))).max())


def sorting(rng):
    v = rng.standard_normal(200_000)
    return float(np.sort(v)[100_000] + np.median(v))


def small_steps(rng):
    # A simulation step per iteration on tiny arrays: dispatch-bound, as real code often is.
    pos = rng.standard_normal((16, 3))
    vel = np.zeros_like(pos)
    for _ in range(400):
        d = pos[:, None, :] - pos[None, :, :]
        r2 = (d * d).sum(-1) + 0.01
        acc = (d / r2[..., None] ** 1.5).sum(1)
        vel += 0.001 * acc
        pos += 0.001 * vel
    return float(np.abs(pos).sum())


rng = np.random.default_rng(1)
total = 0.0
for _ in range(ROUNDS):
    total += products(rng) + spectra(rng) + sorting(rng) + small_steps(rng)
print("checksum %.3f" % total)
