"""libpyagent.so and its agent need only glibc and export only what they must.

    python3 test_library.py --lib libpyagent.so --map shim/libpyagent.map [--python PY] CASE

libpyagent.so is the stub a process preloads; the agent, libpyagent-core.so beside it (its
version script core.map beside libpyagent.map), is loaded only into CPython (shim/stub.c); the
agent's Push and OTLP encoders, libpyagent-wire.so (wire.map), are loaded by the agent only
when a server is configured (uploader/send.c).
glibc_only: readelf -d names no library outside glibc (libc, libm, libdl, libpthread, librt,
    the loader) for any of the three, besides the stub for the agent: libunwind, zlib,
    protobuf-c and libgcc are linked in.
exports: nm -D --defined-only is exactly each version script's global list.
wire_apart: the agent holds no protobuf-c code and no protoc-c descriptor (those are most of a
    library's relocated data, copied at every load), the wire library does; a Python process
    with a server configured maps the wire library (a process without one does not:
    nothing_else_mapped); with the wire library missing, uploads are refused in one line on
    standard error naming it, and the program and its local file are as without a server.
cmake_install: cmake --install puts every file where GNUInstallDirs says.
no_fault_injection: the agent (give the package build's) holds no fault-injection hook: not
    the variable that enables it, not the walker's counter; the test build's does (--test-lib).
nothing_else_mapped: a Python process under the agent maps no shared object that the same
    process without it does not map, except libpyagent.so and libpyagent-core.so (uploads off:
    libcurl is loaded only to upload).
stub_segments: the stub maps in two segments, code with read-only data and writable data (every
    process the preload reaches pays for each mapping and its first touch), neither both
    writable and executable, its relocated data made read-only again (GNU_RELRO); the agent
    keeps its read-only data in segments that are not executable.
stub_only_outside_python: a process that is not Python (/bin/cat, /bin/sh) maps libpyagent.so
    and not the agent, writes nothing to its standard error and exits as without it.
stub_without_agent: libpyagent.so copied alone into a directory: a Python program runs as
    without it, and standard error says in one line that the agent could not be loaded."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

GLIBC = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"}


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent"))
from harness import Failure, check  # noqa: E402


CORE = "libpyagent-core.so"
WIRE = "libpyagent-wire.so"


def core_of(lib):
    return os.path.join(os.path.dirname(os.path.abspath(lib)), CORE)


def wire_of(lib):
    return os.path.join(os.path.dirname(os.path.abspath(lib)), WIRE)


def test_glibc_only(a):
    for lib, allowed in ((a.lib, GLIBC), (core_of(a.lib), GLIBC | {"libpyagent.so"}), (wire_of(a.lib), GLIBC)):
        out = subprocess.run(["readelf", "-dW", lib], capture_output=True, text=True, check=True).stdout
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
        check(needed, "readelf found no NEEDED entry at all in %s:\n%s" % (lib, out))
        check(needed <= allowed, "%s needs more than glibc: %s" % (lib, sorted(needed - allowed)))
        check(not re.search(r"\((RPATH|RUNPATH)\)", out), "%s carries a search path:\n%s" % (lib, out))


def test_exports(a):
    maps = os.path.dirname(a.map)
    for lib, vmap in ((a.lib, a.map), (core_of(a.lib), os.path.join(maps, "core.map")),
                      (wire_of(a.lib), os.path.join(maps, "wire.map"))):
        out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
        exported = {l.split()[-1] for l in out.splitlines() if l.strip()}
        text = open(vmap).read()
        glob = re.search(r"global:(.*?)local:", text, re.S).group(1)
        wanted = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*;", glob))
        check(wanted, "no global symbol in %s" % vmap)
        check(exported == wanted, "%s exports %s; the version script says %s" % (lib, sorted(exported), sorted(wanted)))


def load_segments(lib):
    """The flags ("R E", "RW ", ...) of each LOAD segment of lib, and whether it has GNU_RELRO."""
    out = subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True, check=True).stdout
    flags = [m.group(1) for m in re.finditer(r"^\s*LOAD\s+(?:\S+\s+){5}([RWE ]{3})\s+0x", out, re.M)]
    return flags, bool(re.search(r"^\s*GNU_RELRO\s", out, re.M)), out


def test_stub_segments(a):
    flags, relro, out = load_segments(a.lib)
    check(len(flags) == 2, "%s has %d LOAD segments, not 2 (code with read-only data, writable data):\n%s"
          % (a.lib, len(flags), out))
    check(not any("W" in f and "E" in f for f in flags), "%s has a segment both writable and executable:\n%s"
          % (a.lib, out))
    check(relro, "%s has no GNU_RELRO segment:\n%s" % (a.lib, out))
    core_flags, core_relro, core_out = load_segments(core_of(a.lib))
    check(any(f.strip() == "R" for f in core_flags) and core_relro,
          "%s has no read-only segment apart from its code, or no GNU_RELRO:\n%s" % (core_of(a.lib), core_out))
    check(not any("W" in f and "E" in f for f in core_flags),
          "%s has a segment both writable and executable:\n%s" % (core_of(a.lib), core_out))


def fault_hooks(lib):
    with open(lib, "rb") as f:
        data = f.read()
    return [w for w in (b"PYAGENT_FAULT_INJECT", b"pa_walk_inject_every") if w in data]


def test_no_fault_injection(a):
    check(a.test_lib, "--test-lib (a test build's library, which must have the hooks) is needed")
    check(fault_hooks(core_of(a.test_lib)),
          "the test build %s has no fault-injection hook: the check sees nothing" % core_of(a.test_lib))
    for lib in (a.lib, core_of(a.lib), wire_of(a.lib)):
        found = fault_hooks(lib)
        check(not found, "%s holds fault-injection hooks: %s" % (lib, [w.decode() for w in found]))


def mapped(argv, env):
    prog = ("import re\n"
            "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') "
            "if re.search(r'\\.so(\\.[0-9.]+)?$', l.strip())})))")
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(argv + ["-c", prog], capture_output=True, text=True, env=env, cwd=tmp)
        check(r.returncode == 0, "python failed: %s" % r.stderr)
        return {os.path.basename(p) for p in r.stdout.split()}


def test_nothing_else_mapped(a):
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    without = mapped([a.python], base)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(base, LD_PRELOAD=os.path.abspath(a.lib), PYAGENT_OUTPUT=os.path.join(tmp, "p.folded"))
        under = mapped([a.python], env)
    extra = under - without
    check(extra == {os.path.basename(a.lib), CORE}, "the agent brought in %s" % sorted(extra))


def symbols(lib):
    """The names in lib's full symbol table (nm: the build is not stripped)."""
    out = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout
    return {l.split()[-1] for l in out.splitlines() if len(l.split()) >= 2}


def test_wire_apart(a):
    core, wire = symbols(core_of(a.lib)), symbols(wire_of(a.lib))
    check("pa_core_attach" in core and "pa_wire_api_1" in wire, "nm sees neither library's entry point")
    for names, lib, want in ((core, CORE, False), (wire, WIRE, True)):
        found = sorted(n for n in names if n.startswith("protobuf_c_") or n.endswith("__descriptor"))
        check(bool(found) == want, "%s %s protobuf-c: %s" % (lib, "lacks" if want else "holds", found[:8]))
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    with tempfile.TemporaryDirectory() as tmp:
        # A server nobody listens on: the agent loads what it uploads with at start, and the
        # upload itself fails (the exit deadline is kept short) and is spooled. 1 kHz: a short
        # program's few samples at 100 Hz may be none, and then nothing is spooled.
        env = dict(base, LD_PRELOAD=os.path.abspath(a.lib), PYAGENT_OUTPUT=os.path.join(tmp, "p.folded"),
                   PYAGENT_SERVER="http://127.0.0.1:9", PYAGENT_PROTOCOL="push", PYAGENT_RATE="1000",
                   PYAGENT_SPOOL_DIR=os.path.join(tmp, "spool"), PYAGENT_EXIT_TIMEOUT_MS="100")
        under = mapped([a.python], env)
        check(WIRE in under, "with a server, the agent did not load %s: %s" % (WIRE, sorted(under)))
        # The stub and the agent alone in a directory: uploads are refused, nothing else changes.
        alone = os.path.join(tmp, "alone")
        os.mkdir(alone)
        for f in (a.lib, core_of(a.lib)):
            shutil.copy(f, alone)
        out = os.path.join(tmp, "q.folded")
        spool = os.path.join(tmp, "spool2")
        env = dict(env, LD_PRELOAD=os.path.join(alone, "libpyagent.so"), PYAGENT_OUTPUT=out, PYAGENT_SPOOL_DIR=spool)
        prog = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\nprint(6 * 7)"
        r = subprocess.run([a.python, "-c", prog], capture_output=True, text=True, cwd=tmp, env=env)
        check(r.returncode == 0 and r.stdout == "42\n", "rc %d, stdout %r, stderr %r" % (r.returncode, r.stdout, r.stderr))
        refused = [l for l in r.stderr.splitlines() if WIRE in l]
        check(len(refused) == 1 and re.match(r"pyagent\[\d+\]: .*cannot load %s.*: not uploading$"
                                             % re.escape(os.path.join(alone, WIRE)), refused[0]),
              "standard error does not say in one line that uploads are off: %r" % r.stderr)
        check(os.path.isfile(out) and ";" in open(out).read(), "no local profile beside the refused uploads: %s"
              % os.listdir(tmp))
        check(os.listdir(os.path.join(tmp, "spool")), "the first run, with the wire library, spooled nothing")
        check(not os.path.exists(spool), "a spool was made with uploads off: %s" % spool)


def test_stub_only_outside_python(a):
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    env = dict(base, LD_PRELOAD=os.path.abspath(a.lib))
    for argv in (["/bin/cat", "/proc/self/maps"], ["/bin/sh", "-c", "cat /proc/$$/maps; exit 3"]):
        plain = subprocess.run(argv, capture_output=True, text=True, env=base)
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        names = {os.path.basename(l.split()[-1]) for l in r.stdout.splitlines() if len(l.split()) >= 6}
        check(os.path.basename(a.lib) in names, "%s: the stub is not mapped:\n%s" % (argv, r.stdout))
        check(CORE not in names, "%s: the agent was loaded into a process that is not Python" % argv)
        check(r.returncode == plain.returncode, "%s: exit status %d, %d without the stub" % (argv, r.returncode,
                                                                                       plain.returncode))
        check(r.stderr == plain.stderr == "", "%s wrote to standard error: %r" % (argv, r.stderr))


def test_stub_without_agent(a):
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "libpyagent.so")
        shutil.copy(a.lib, alone)
        r = subprocess.run([a.python, "-c", "print(6 * 7)"], capture_output=True, text=True, cwd=tmp,
                           env=dict(base, LD_PRELOAD=alone))
        check(r.returncode == 0 and r.stdout == "42\n", "rc %d, stdout %r, stderr %r" % (r.returncode, r.stdout, r.stderr))
        lines = r.stderr.splitlines()
        check(len(lines) == 1 and re.match(r"pyagent\[\d+\]: cannot load the agent: .*%s.*; not profiling$"
                                           % re.escape(CORE), lines[0]), "stderr: %r" % r.stderr)
        check(os.listdir(tmp) == ["libpyagent.so"], "files written: %s" % os.listdir(tmp))


def test_cmake_install(a):
    """cmake --install into /usr/local (under DESTDIR): the GNUInstallDirs places, and the
    installed launcher and unit point at the installed files."""
    with tempfile.TemporaryDirectory() as dest:
        env = dict(os.environ, DESTDIR=dest)
        r = subprocess.run(["cmake", "--install", a.build, "--prefix", "/usr/local"], env=env,
                           capture_output=True, text=True)
        check(r.returncode == 0, "cmake --install failed: %s" % r.stderr)
        root = os.path.join(dest, "usr/local")
        for f in ["lib/libpyagent.so", "lib/" + CORE, "lib/" + WIRE, "bin/pyagent", "bin/pyagent-render", "bin/pyagent-collector",
                  "share/man/man1/pyagent.1", "share/man/man1/pyagent-render.1",
                  "share/man/man1/pyagent-collector.1", "lib/systemd/system/pyagent-collector.service",
                  "share/doc/pyagent/install.md", "lib/python3/dist-packages/pyagent.py"]:
            check(os.path.isfile(os.path.join(root, f)), "cmake --install did not install %s" % f)
        for f in ["bin/pyagent", "bin/pyagent-render", "bin/pyagent-collector"]:
            check(os.access(os.path.join(root, f), os.X_OK), "%s is not executable" % f)
        lib = subprocess.run([os.path.join(root, "bin/pyagent"), "lib"], capture_output=True, text=True)
        check(lib.stdout.strip() == os.path.join(root, "lib/libpyagent.so"), "pyagent lib: %r" % lib.stdout)
        unit = open(os.path.join(root, "lib/systemd/system/pyagent-collector.service")).read()
        check("ExecStart=/usr/local/bin/pyagent-collector " in unit, "the unit's ExecStart:\n" + unit)
        man = open(os.path.join(root, "share/man/man1/pyagent.1")).read()
        check(man.startswith(".TH pyagent 1") and "pyagent run" in man, "pyagent.1:\n" + man[:500])


def main():
    ap = argparse.ArgumentParser(description="checks of the built libpyagent.so")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--map", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--build", help="the build directory (cmake_install)")
    ap.add_argument("--test-lib", help="a test build's library (no_fault_injection)")
    cases = {n[5:]: f for n, f in globals().items() if n.startswith("test_")}
    ap.add_argument("case", choices=sorted(cases))
    a = ap.parse_args()
    try:
        cases[a.case](a)
    except Failure as e:
        sys.exit("FAIL %s: %s" % (a.case, e))
    print("PASS %s" % a.case)


if __name__ == "__main__":
    main()
