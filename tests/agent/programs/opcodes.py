"""A hot function and what `dis` says its instructions are (for PYAGENT_OPCODES).

    python opcodes.py OUT.json

OUT.json maps each instruction offset of hot() to the names a sample may give it: its opcode
as dis shows it and, from 3.11, the specialized forms the interpreter may rewrite it to; and
each offset to its source span, [line, end line, column, end column] as co_positions() gives
it (3.11+; None where the table has none). hot() runs in the main thread and in a thread named
Other at once."""
import dis
import json
import sys
import threading
import time


class Box:
    b = 3


def hot(n, a=Box(), c=(1, 2, 3, 4), d=5):
    s = 0
    for i in range(n):
        s += i * i
        x = a.b + c[i & 3] * d
    return s + x


def specializations():
    for mod in ("opcode", "_opcode_metadata"):
        try:
            table = getattr(__import__(mod), "_specializations")
            return {k: list(v) for k, v in table.items()}
        except (ImportError, AttributeError):
            continue
    return {}


spec = specializations()
names, spans = {}, {}
for ins in dis.get_instructions(hot):
    names[ins.offset] = [ins.opname] + spec.get(ins.opname, [])
    if sys.version_info >= (3, 11):
        spans[ins.offset] = list(ins.positions)
until = time.process_time() + 1.5  # CPU time: the same samples on a loaded machine


def burn():
    while time.process_time() < until:
        hot(100_000)


# hot() runs in two threads at once: a free-threaded 3.14 gives each thread that specializes
# a function its own copy of the bytecode, whose offsets count from that copy.
other = threading.Thread(target=burn, name="Other")
other.start()
burn()
other.join()
# The agent thread finds the instructions' columns while the interpreter runs (every 100 ms):
# time for it to see the last samples' before the profile is written after finalization.
time.sleep(0.5)
with open(sys.argv[1], "w") as f:
    json.dump({"version": list(sys.version_info[:2]), "names": names, "spans": spans}, f)
