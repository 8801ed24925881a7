"""A small order-processing service doing real work, used by `./quickstart demo`.

Worker threads take JSON orders from a queue, validate them with regular expressions, price
them, store them in SQLite, render and compress receipts; a reporting thread aggregates.
Runs for about SECONDS (argv[1], default 12) and prints a summary."""
import hashlib
import json
import queue
import random
import re
import sqlite3
import sys
import threading
import time
import zlib

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
EMAIL = re.compile(r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$")
SKU = re.compile(r"^[A-Z]{3}-\d{4}$")
CATALOG = {"ABC-%04d" % i: round(random.uniform(1, 200), 2) for i in range(2000)}


def make_order(rng, n):
    return json.dumps({
        "id": n,
        "email": "user%d@example.com" % rng.randrange(10000),
        "lines": [{"sku": rng.choice(list(CATALOG)), "qty": rng.randrange(1, 5)}
                  for _ in range(rng.randrange(1, 12))],
    })


def validate(order):
    if not EMAIL.match(order["email"]):
        raise ValueError("bad email")
    for line in order["lines"]:
        if not SKU.match(line["sku"]):
            raise ValueError("bad sku")


def price(order):
    total = 0.0
    for line in order["lines"]:
        total += CATALOG[line["sku"]] * line["qty"]
    discount = 0.1 if total > 500 else 0.0
    return round(total * (1 - discount), 2)


def render_receipt(order, total):
    rows = "\n".join("%-10s x%d %10.2f" % (l["sku"], l["qty"], CATALOG[l["sku"]] * l["qty"])
                     for l in order["lines"])
    body = "Order %d\n%s\nTotal %.2f\n" % (order["id"], rows, total)
    return zlib.compress((body * 40).encode(), 9)


def sign(receipt):
    h = receipt
    for _ in range(50):
        h = hashlib.sha256(h).digest()
    return h.hex()


def worker(q, results, lock):
    db = sqlite3.connect(":memory:")
    db.execute("create table orders (id integer, email text, total real)")
    while True:
        raw = q.get()
        if raw is None:
            break
        order = json.loads(raw)
        validate(order)
        total = price(order)
        db.execute("insert into orders values (?, ?, ?)", (order["id"], order["email"], total))
        receipt = render_receipt(order, total)
        signature = sign(receipt)
        with lock:
            results.append((order["id"], total, signature[:8]))
    count, revenue = db.execute("select count(*), sum(total) from orders").fetchone()
    with lock:
        results.append(("db", count, revenue))


def reporter(results, lock, stop):
    while not stop.is_set():
        with lock:
            totals = sorted(r[1] for r in results if r[0] != "db")
        if totals:
            _ = totals[len(totals) // 2]
        time.sleep(0.2)


def main():
    rng = random.Random(7)
    q = queue.Queue(maxsize=200)
    results, lock, stop = [], threading.Lock(), threading.Event()
    workers = [threading.Thread(target=worker, args=(q, results, lock), name="worker-%d" % i)
               for i in range(3)]
    rep = threading.Thread(target=reporter, args=(results, lock, stop), name="reporter")
    for t in workers + [rep]:
        t.start()
    n = 0
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        q.put(make_order(rng, n))
        n += 1
    for _ in workers:
        q.put(None)
    for t in workers:
        t.join()
    stop.set()
    rep.join()
    print("processed %d orders in %.0f s" % (n, SECONDS))


if __name__ == "__main__":
    main()
