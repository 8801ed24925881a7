"""libpyagent.so needs only glibc and exports only what it interposes.

    python3 test_library.py --lib libpyagent.so --map shim/libpyagent.map [--python PY] CASE

glibc_only: readelf -d names no library outside glibc (libc, libm, libdl, libpthread, librt,
    the loader): libunwind, zlib and libgcc are linked in.
exports: nm -D --defined-only is exactly the version script's global list.
cmake_install: cmake --install puts every file where GNUInstallDirs says.
no_fault_injection: the library (give the package build's) holds no fault-injection hook: not
    the variable that enables it, not the walker's counter; the test build's does (--test-lib).
nothing_else_mapped: a Python process under the agent maps no shared object that the same
    process without it does not map, except libpyagent.so itself (uploads off: libcurl is
    loaded only to upload)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

GLIBC = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"}


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent"))
from harness import Failure, check  # noqa: E402


def test_glibc_only(a):
    out = subprocess.run(["readelf", "-dW", a.lib], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    check(needed, "readelf found no NEEDED entry at all:\n" + out)
    check(needed <= GLIBC, "libpyagent.so needs more than glibc: %s" % sorted(needed - GLIBC))
    check(not re.search(r"\((RPATH|RUNPATH)\)", out), "libpyagent.so carries a search path:\n" + out)


def test_exports(a):
    out = subprocess.run(["nm", "-D", "--defined-only", a.lib], capture_output=True, text=True, check=True).stdout
    exported = {l.split()[-1] for l in out.splitlines() if l.strip()}
    text = open(a.map).read()
    glob = re.search(r"global:(.*?)local:", text, re.S).group(1)
    wanted = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*;", glob))
    check(wanted, "no global symbol in %s" % a.map)
    check(exported == wanted, "exported %s; the version script says %s" % (sorted(exported), sorted(wanted)))


def fault_hooks(lib):
    with open(lib, "rb") as f:
        data = f.read()
    return [w for w in (b"PYAGENT_FAULT_INJECT", b"pa_walk_inject_every") if w in data]


def test_no_fault_injection(a):
    check(a.test_lib, "--test-lib (a test build's library, which must have the hooks) is needed")
    check(fault_hooks(a.test_lib), "the test build %s has no fault-injection hook: the check sees nothing" % a.test_lib)
    found = fault_hooks(a.lib)
    check(not found, "%s holds fault-injection hooks: %s" % (a.lib, [w.decode() for w in found]))


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
    check(extra == {os.path.basename(a.lib)}, "the agent brought in %s" % sorted(extra))


def test_cmake_install(a):
    """cmake --install into /usr/local (under DESTDIR): the GNUInstallDirs places, and the
    installed launcher and unit point at the installed files."""
    with tempfile.TemporaryDirectory() as dest:
        env = dict(os.environ, DESTDIR=dest)
        r = subprocess.run(["cmake", "--install", a.build, "--prefix", "/usr/local"], env=env,
                           capture_output=True, text=True)
        check(r.returncode == 0, "cmake --install failed: %s" % r.stderr)
        root = os.path.join(dest, "usr/local")
        for f in ["lib/libpyagent.so", "bin/pyagent", "bin/pyagent-render", "bin/pyagent-collector",
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
