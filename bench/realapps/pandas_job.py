"""The pandas workload of the real-application benchmark (run.py): a fixed amount of work
(ROUNDS = argv[1]) as a reporting job does it: build a frame of orders, parse dates, join
with a customer table, group and aggregate, pivot, string operations, and write CSV."""
import io
import sys

import numpy as np
import pandas as pd

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10


def one_round(rng, n=40_000):
    orders = pd.DataFrame({
        "order": np.arange(n),
        "customer": rng.integers(0, 2_000, n),
        "day": pd.to_datetime("2026-01-01") + pd.to_timedelta(rng.integers(0, 300, n), unit="D"),
        "amount": rng.gamma(2.0, 30.0, n).round(2),
        "sku": ["SKU-%04d" % k for k in rng.integers(0, 500, n)],
    })
    customers = pd.DataFrame({"customer": np.arange(2_000),
                              "region": rng.choice(["north", "south", "east", "west"], 2_000),
                              "name": ["Customer %d" % i for i in range(2_000)]})
    df = orders.merge(customers, on="customer", how="left")
    df["month"] = df["day"].dt.to_period("M")
    df["family"] = df["sku"].str.slice(4, 6).astype(int)
    by_region = df.groupby(["region", "month"])["amount"].agg(["sum", "mean", "count"])
    pivot = df.pivot_table(index="month", columns="region", values="amount", aggfunc="sum")
    top = df.groupby("name")["amount"].sum().nlargest(20)
    rolling = df.sort_values("day").set_index("day")["amount"].rolling("7D").mean()
    buf = io.StringIO()
    by_region.to_csv(buf)
    pivot.to_csv(buf)
    return len(buf.getvalue()) + float(top.sum()) + float(rolling.iloc[-1])


rng = np.random.default_rng(1)
total = 0.0
for _ in range(ROUNDS):
    total += one_round(rng)
print("checksum %.3f" % total)
