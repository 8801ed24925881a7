#!/usr/bin/env python3
"""One error type: every part reports a failure through pa_error (base/error.h).

    tests/house/check_errors.py [--src DIR]

A function of a part's sources that takes a message buffer as a (char *, size_t) pair, the
convention pa_error replaced (`char *msg, size_t msglen`, `char *err, size_t errlen`,
`char *reason, size_t reason_len`, ...), or an error setter of another name (pa_set_error),
is a second way to say one thing. Exit status 0 when there is none; otherwise each on a line
of its own and status 1. docs/architecture.md, "One home per idea", gives the convention."""
import argparse
import glob
import os
import re
import sys

PARTS = ["base", "profile", "agent", "uploader", "shim", "renderer", "collector"]
# A parameter pair naming a message buffer and its size, anywhere in a parameter list.
PAIR = re.compile(r"\bchar\s*\*\s*(msg|err|errmsg|errbuf|error|reason|why)\w*\s*,\s*size_t\s+\w+")
OTHER = re.compile(r"\bpa_set_error\s*\(")


def violations(text, path):
    out = []
    for rx, what in ((PAIR, "takes a message buffer as (char *, size_t); use pa_error *err"),
                     (OTHER, "sets an error another way; use pa_fail")):
        for m in rx.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append("%s:%d: %s: %s" % (path, line, what, " ".join(m.group(0).split())))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    a = ap.parse_args()
    found, files = [], 0
    for part in PARTS:
        for path in sorted(glob.glob(os.path.join(a.src, part, "*.[ch]"))):
            files += 1
            with open(path, encoding="utf-8", errors="replace") as f:
                found += violations(f.read(), os.path.relpath(path, a.src))
    if files == 0:
        print("check_errors: no sources under %s" % a.src, file=sys.stderr)
        return 1
    for v in found:
        print(v)
    if not found:
        print("one error type: %d files, no (char *, size_t) message pair" % files)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
