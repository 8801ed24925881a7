"""A hot function and what `dis` says its instructions are (for PYAGENT_OPCODES).

    python opcodes.py OUT.json

OUT.json maps each instruction offset of hot() to the names a sample may give it: its opcode
as dis shows it and, from 3.11, the specialized forms the interpreter may rewrite it to."""
import dis
import json
import sys
import time


def hot(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def specializations():
    for mod in ("opcode", "_opcode_metadata"):
        try:
            table = getattr(__import__(mod), "_specializations")
            return {k: list(v) for k, v in table.items()}
        except (ImportError, AttributeError):
            continue
    return {}


spec = specializations()
names = {}
for ins in dis.get_instructions(hot):
    names[ins.offset] = [ins.opname] + spec.get(ins.opname, [])
until = time.process_time() + 1.5  # CPU time: the same samples on a loaded machine
while time.process_time() < until:
    hot(100_000)
with open(sys.argv[1], "w") as f:
    json.dump({"version": list(sys.version_info[:2]), "names": names}, f)
