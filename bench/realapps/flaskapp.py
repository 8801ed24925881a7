"""The web service of the real-application benchmark (run.py): a Flask app as a small shop
would write it, served by gunicorn's sync worker. Three routes, so that a sample lands in
routing, Jinja2 rendering, JSON encoding and request parsing, not in one hot loop:

  /                a catalogue page: 60 products rendered through a template with a loop,
                   filters and a macro
  /api/items?n=N   N products as JSON, with a computed total
  /search?q=WORD   products whose name contains WORD, form-style query parsing

Run: gunicorn -w 1 -b 127.0.0.1:PORT --chdir bench/realapps flaskapp:app"""
import hashlib

from flask import Flask, jsonify, render_template, request

app = Flask(__name__)

WORDS = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "juniper",
         "kestrel", "larch", "maple", "nettle", "osprey", "pine", "quartz", "rowan", "sorrel", "thistle"]


def make_products(n):
    out = []
    for i in range(n):
        name = "%s %s" % (WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)])
        digest = hashlib.sha1(name.encode()).hexdigest()
        out.append({"id": i, "name": name.title(), "sku": digest[:10], "price": round(3.5 + (i * 37 % 900) / 10, 2),
                    "stock": (i * 13) % 40, "tags": [WORDS[(i + k) % len(WORDS)] for k in range(3)]})
    return out


PRODUCTS = make_products(400)


@app.route("/")
def catalogue():
    items = PRODUCTS[:60]
    return render_template("catalogue.html", items=items, total=sum(p["price"] for p in items))


@app.route("/api/items")
def items():
    n = min(int(request.args.get("n", 50)), len(PRODUCTS))
    chosen = PRODUCTS[:n]
    return jsonify(items=chosen, total=round(sum(p["price"] * p["stock"] for p in chosen), 2))


@app.route("/search")
def search():
    q = request.args.get("q", "").lower()
    found = [p for p in PRODUCTS if q in p["name"].lower()]
    return render_template("catalogue.html", items=found[:40], total=sum(p["price"] for p in found))
