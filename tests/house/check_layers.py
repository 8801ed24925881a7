#!/usr/bin/env python3
"""The parts of pyagent form a layered DAG; this proves it from the sources and the objects.

    tests/house/check_layers.py [--src DIR] [--build DIR]

Three rules, each from what the compiler and linker see, not from what comments say:
  1. An `#include "..."` in a part's file names a file of the same part or of a part it may
     use (LAYERS below).
  2. A symbol a part's object file leaves undefined (`nm -u`) and another part defines is
     defined by a part it may use: no call, no variable, goes upward.
  3. Within a part, the object files' symbol references form no cycle (shim/ excepted: it is
     the interposition layer, whose files call each other by design; docs/architecture.md).

Exit status 0 when all hold; otherwise each violation on a line of its own and status 1.
docs/architecture.md, "Layers", shows the same picture."""
import argparse
import glob
import os
import re
import subprocess
import sys

# part -> the parts it may use (below it). base is the bottom of everything.
LAYERS = {
    "base": set(),
    "profile": {"base"},
    "proto": {"base"},
    "agent": {"base", "profile"},
    "uploader": {"base", "profile", "proto", "agent"},
    "shim": {"base", "profile", "proto", "agent", "uploader"},
    "renderer": {"base", "profile"},
    "collector": {"base", "profile", "proto", "renderer"},
}
# Parts whose files may call each other in a circle (see the module's docstring).
CYCLES_ALLOWED = {"shim"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def part_of(path, src):
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(src))
    top = rel.split(os.sep)[0]
    return top if top in LAYERS else None


def source_files(src, part):
    out = []
    for ext in ("c", "h", "inc"):
        out += glob.glob(os.path.join(src, part, "*." + ext))
    return sorted(out)


def resolve_include(name, including, src):
    """The file an #include "name" in `including` means: beside it, else in a part's folder
    that exports its headers by name (profile/, renderer/ add themselves to the include path)."""
    here = os.path.join(os.path.dirname(including), name)
    if os.path.exists(here):
        return here
    for part in ("profile", "renderer"):
        cand = os.path.join(src, part, name)
        if os.path.exists(cand):
            return cand
    return None


def include_edges(src):
    """(file, included file) pairs between files of the parts."""
    edges = []
    for part in LAYERS:
        for f in source_files(src, part):
            with open(f, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for name in INCLUDE.findall(text):
                target = resolve_include(name, f, src)
                if target and part_of(target, src):
                    edges.append((f, target))
    return edges


def objects(build, src, part):
    """The part's own object files: those compiled from its folder's sources, in any target
    the part's CMakeLists.txt builds (tests and benchmarks compiled there are left out)."""
    out = []
    for obj in glob.glob(os.path.join(build, part, "CMakeFiles", "*.dir", "*.c.o")):
        source = os.path.join(src, part, os.path.basename(obj)[: -len(".o")])
        if os.path.exists(source):
            out.append((source, obj))
    # One object per source: a source built into two targets (a library and an executable)
    # has the same symbols in both.
    seen, unique = set(), []
    for source, obj in sorted(out):
        if source not in seen:
            seen.add(source)
            unique.append((source, obj))
    return unique


def nm(obj, *flags):
    out = subprocess.run(["nm", *flags, obj], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        fields = line.split()
        if not fields:
            continue
        syms.add(fields[-1])
    return syms


def interposed(src):
    """The C library's functions libpyagent.so defines to see what the program does (its
    version script's exports): a call to one of them from another part is a call to the C
    library, not to the shim."""
    with open(os.path.join(src, "shim", "libpyagent.map")) as f:
        text = f.read()
    body = text.split("global:", 1)[1].split("local:", 1)[0]
    return {w.strip() for w in body.split(";") if w.strip()}


def symbol_edges(build, src):
    """(source file, source file, symbol) for every undefined symbol one of our objects needs
    and another defines (the C library's interposed functions left out)."""
    libc = interposed(src)
    defined, needs = {}, {}
    for part in LAYERS:
        for source, obj in objects(build, src, part):
            for s in nm(obj, "--defined-only", "-g"):
                defined.setdefault(s, source)
            needs[source] = nm(obj, "-u")
    edges = []
    for source, syms in needs.items():
        for s in sorted(syms):
            if s in defined and defined[s] != source and s not in libc:
                edges.append((source, defined[s], s))
    return edges, len(needs)


def check_parts(edges, src, what):
    """Violations of rule 1 or 2: an edge whose target's part the source's part may not use."""
    bad = []
    for e in edges:
        a, b = part_of(e[0], src), part_of(e[1], src)
        if a and b and a != b and b not in LAYERS[a]:
            how = "includes" if what == "include" else "uses %s from" % e[2]
            bad.append("upward %s: %s %s %s (%s may use only %s)" % (
                what, os.path.relpath(e[0], src), how, os.path.relpath(e[1], src), a,
                ", ".join(sorted(LAYERS[a])) or "nothing"))
    return bad


def cycles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    graph = {n: set() for n in nodes}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_cycles(sym_edges, src):
    bad = []
    for part in sorted(LAYERS):
        if part in CYCLES_ALLOWED:
            continue
        inner = [(a, b) for a, b, _ in sym_edges if part_of(a, src) == part and part_of(b, src) == part]
        for comp in cycles({a for a, _ in inner} | {b for _, b in inner}, inner):
            names = [os.path.relpath(f, src) for f in comp]
            why = ["%s -> %s (%s)" % (os.path.relpath(a, src), os.path.relpath(b, src), s)
                   for a, b, s in sym_edges if a in comp and b in comp]
            bad.append("cycle in %s/: %s; references: %s" % (part, " <-> ".join(names), "; ".join(why[:8])))
    return bad


def main():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=here)
    ap.add_argument("--build", default=os.path.join(here, "build", "release"))
    a = ap.parse_args()
    inc = include_edges(a.src)
    sym, nobj = symbol_edges(a.build, a.src)
    if nobj == 0:
        print("check_layers: no object files under %s (build first)" % a.build, file=sys.stderr)
        return 2
    bad = check_parts(inc, a.src, "include") + check_parts(sym, a.src, "reference") + check_cycles(sym, a.src)
    for line in bad:
        print(line)
    print("check_layers: %d include edges, %d symbol references between %d object files: %s"
          % (len(inc), len(sym), nobj, "%d violation(s)" % len(bad) if bad else "a DAG"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
