#!/usr/bin/env python3
"""The signal-handler boundary, proved from the compiled objects.

    tests/house/check_handler.py [--src DIR] [--build DIR] [--show]

Every function that can run in signal context is found by following calls from the roots
below through the objects' relocations (the build compiles with -ffunction-sections, so each
function's calls are the relocations of its own section; a relocation is a call when the
instruction it belongs to is a call or a jump: e8, e9, 0f 8x, ff 15/25). Two rules:
  1. every such function lives in a file marked SIGNAL-HANDLER SIDE (HANDLER_FILES, and the
     file's opening comment says so);
  2. every function outside our objects that such a function calls is on ALLOWED: functions
     POSIX lists as async-signal-safe, or that glibc implements as a bare system call or a
     memory read, each with its reason.
  3. the library binds each of those functions when it is loaded (a GOT entry, R_X86_64_GLOB_DAT),
     never on first call (R_X86_64_JUMP_SLOT): the stub libpyagent.so (STUB_ROOTS) and the agent
     libpyagent-core.so (ROOTS) are linked with -z lazy, and the
     loader's lazy resolver must not run in signal context, where it would save the vector
     registers on whatever stack the handler has. The functions libunwind calls (it unwinds in
     the handler) count too. CMakeLists.txt compiles the SIGNAL-HANDLER SIDE files, and
     scripts/libunwind.sh libunwind, with -fno-plt for this.
--show prints the reachable functions and the external calls with their callers.
Calls through function pointers are not followed: the functions given to others as callbacks
that run in signal context are roots of their own (libunwind's memory accessor); the program's
own handlers (the point of chaining) and Py_IsInitialized (it reads one field) are not ours.

Exit status 0 when both hold; otherwise each violation on its own line and status 1."""
import argparse
import glob
import os
import re
import struct
import subprocess
import sys

ROOTS = [
    ("agent/handler.c", "on_sigprof"),       # the SIGPROF handler
    ("agent/guard.c", "pa_guard_fault"),     # the SIGSEGV/SIGBUS guard
    ("shim/signals.c", "wrapper"),           # around the program's own handlers
    ("shim/signals.c", "pa_ix_pthread_sigmask"),   # async-signal-safe in POSIX: ours must be too
    ("shim/signals.c", "pa_ix_sigprocmask"),
    ("shim/signals.c", "pa_ix_sigaction"),
    ("agent/native.c", "guarded_access_mem"),  # libunwind calls it while unwinding in the handler
    ("agent/timers.c", "perf_helper"),  # the helper process that makes a perf event (clone)
]
# The stub libpyagent.so (shim/stub.c) exports the interposed functions and, before the agent
# is loaded, makes the C library's calls itself: its async-signal-safe ones are roots too.
STUB_ROOTS = [
    ("shim/stub.c", "sigaction"),
    ("shim/stub.c", "pthread_sigmask"),
    ("shim/stub.c", "sigprocmask"),
]

HANDLER_FILES = {
    "base/realfns.c", "agent/handler.c", "agent/frames.c", "agent/codecache.c", "agent/table.c",
    "agent/guard.c", "agent/chain.c", "agent/timers.c", "agent/timerctl.c", "agent/native.c",
    "agent/pyversions.c", "agent/labels.c", "agent/tasks.c", "shim/signals.c", "shim/stub.c",
}

# Functions of the C library (and of the static libunwind) that code in signal context may call.
ALLOWED = {
    # POSIX.1-2017 async-signal-safe list
    "sigaddset": "POSIX", "sigdelset": "POSIX", "sigemptyset": "POSIX", "sigfillset": "POSIX",
    "sigismember": "POSIX", "getpid": "POSIX", "clock_gettime": "POSIX", "timer_settime": "POSIX",
    "fcntl": "POSIX", "close": "POSIX", "read": "POSIX", "write": "POSIX",
    "memcpy": "POSIX (2016 list)", "memset": "POSIX (2016 list)", "memcmp": "POSIX (2016 list)",
    "memmove": "POSIX (2016 list)", "strlen": "POSIX (2016 list)",
    # glibc: a system call with nothing around it
    "syscall": "glibc: the bare system call (tgkill, perf_event_open, exit_group, rt_sigprocmask, timer_settime)",
    "ioctl": "glibc: a bare system call (perf event enable/disable/refresh)",
    "mmap": "glibc: a bare system call (no lock, no allocation)",
    "munmap": "glibc: a bare system call",
    "sigtimedwait": "glibc: a bare system call (rt_sigtimedwait)",
    "clone": "glibc: the system call, as its own posix_spawn makes its helper (CLONE_VM|CLONE_VFORK)",
    "waitpid": "POSIX",
    # glibc: memory reads, or compiler support
    "__errno_location": "glibc: the address of the thread's errno (TLS)",
    "pthread_self": "glibc: reads the thread pointer",
    "pthread_getspecific": "glibc: reads the thread's key array",
    "sigorset": "glibc: bit operations on a sigset_t",
    "__sigsetjmp": "the fault guard's own frame: saves registers, no mask (savemask 0)",
    "siglongjmp": "the fault guard jumps back within the same handler's frames",
    "__stack_chk_fail": "never returns: the stack protector ends the process",
    "__sigaction": "glibc's sigaction (POSIX: async-signal-safe)",
    # libunwind, linked in statically: local unwinding is documented as signal-safe
    "_ULx86_64_init_local": "libunwind: signal-safe local unwinding",
    "_ULx86_64_init_local2": "libunwind: signal-safe local unwinding",
    "_ULx86_64_step": "libunwind: signal-safe local unwinding",
    "_ULx86_64_get_reg": "libunwind: signal-safe local unwinding",
    "_ULx86_64_get_proc_info": "libunwind: the FDE search unw_step does (step cache probes)",
    "unw_backtrace": "libunwind: signal-safe local unwinding",
}

SECTION = re.compile(r"^\s*\[\s*(\d+)\]\s+(\S+)")
RELSEC = re.compile(r"^Relocation section '\.rela(\.text\.\S+)'")


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def section_bytes(path):
    """Section name -> its bytes, from the ELF64 little-endian file itself."""
    with open(path, "rb") as f:
        data = f.read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = heads[shstrndx][4]
    out = {}
    for h in heads:
        name_end = data.index(b"\0", names_off + h[0])
        name = data[names_off + h[0]:name_end].decode()
        if name.startswith(".text"):
            out[name] = data[h[4]:h[4] + h[5]]
    return out


def is_call(code, off):
    """Is the 4-byte field at off the target of a call or a jump (not an address taken)?"""
    if off >= 1 and code[off - 1] in (0xE8, 0xE9):
        return True
    if off >= 2 and code[off - 2] == 0x0F and 0x80 <= code[off - 1] <= 0x8F:
        return True
    if off >= 2 and code[off - 2] == 0xFF and code[off - 1] in (0x15, 0x25):
        return True
    return False


class Obj:
    """One object file: its functions (by section) and the functions each one calls."""

    def __init__(self, path, source):
        self.path, self.source = path, source
        sections = {}
        for line in readelf("-S", path).splitlines():
            m = SECTION.match(line)
            if m:
                sections[m.group(1)] = m.group(2)
        code = section_bytes(path)
        self.funcs = {}       # name -> (binding, section name)
        self.data = set()     # data symbols defined here
        self.by_section = {}  # section name -> [function names]
        self.undefined = set()
        for line in readelf("-s", path).splitlines():
            f = line.split()
            if len(f) < 8 or not f[0].endswith(":"):
                continue
            typ, bind, ndx, name = f[3], f[4], f[6], f[7]
            if ndx == "UND":
                if name:
                    self.undefined.add(name)
            elif typ == "FUNC":
                sec = sections.get(ndx, "")
                self.funcs[name] = (bind, sec)
                self.by_section.setdefault(sec, []).append(name)
            elif typ in ("OBJECT", "TLS") and bind in ("GLOBAL", "WEAK"):
                self.data.add(name)
        self.calls = {}  # function -> set of symbol or section names it calls
        current, body = None, b""
        for line in readelf("-r", path).splitlines():
            m = RELSEC.match(line)
            if m:
                current = self.by_section.get(m.group(1), [])
                body = code.get(m.group(1), b"")
                continue
            if line.startswith("Relocation section"):
                current = None
                continue
            f = line.split()
            if current is None or len(f) < 5 or not re.match(r"^[0-9a-f]+$", f[0]):
                continue
            if not is_call(body, int(f[0], 16)):
                continue
            for fn in current:
                self.calls.setdefault(fn, set()).add(f[4])


def our_objects(src, build):
    """libpyagent.so's objects: base/, agent/, uploader/, shim/ (sources of those folders)."""
    out = []
    for part in ("base", "agent", "uploader", "shim"):
        for obj in glob.glob(os.path.join(build, part, "CMakeFiles", "*.dir", "*.c.o")):
            source = os.path.join(part, os.path.basename(obj)[: -len(".o")])
            if os.path.exists(os.path.join(src, source)) and not any(o.source == source for o in out):
                out.append(Obj(obj, source))
    return out


def reachable(objs, roots):
    globals_, data = {}, set()
    for o in objs:
        data |= o.data
        for name, (bind, _) in o.funcs.items():
            if bind in ("GLOBAL", "WEAK"):
                globals_.setdefault(name, o)
    by_source = {o.source: o for o in objs}
    seen, external, todo = {}, {}, []
    for source, name in roots:
        o = by_source.get(source)
        if not o or name not in o.funcs:
            raise SystemExit("check_handler: root %s:%s not found (rebuild, or update ROOTS)" % (source, name))
        todo.append((o, name, "root"))
    while todo:
        o, fn, via = todo.pop()
        key = (o.source, fn)
        if key in seen:
            continue
        seen[key] = via
        for t in sorted(o.calls.get(fn, ())):
            if t.startswith(".text."):  # a local function referenced through its section
                for callee in o.by_section.get(t, []):
                    todo.append((o, callee, "%s:%s" % (o.source, fn)))
            elif t in o.funcs:
                todo.append((o, t, "%s:%s" % (o.source, fn)))
            elif t in globals_:
                todo.append((globals_[t], t, "%s:%s" % (o.source, fn)))
            elif t in o.undefined and t not in data:
                external.setdefault(t, set()).add("%s:%s" % (o.source, fn))
    return seen, external


def lazily_bound(lib):
    """The functions a shared library binds on first call: its R_X86_64_JUMP_SLOT relocations,
    unless it is linked with -z now (then the loader binds those at load too)."""
    if re.search(r"\(FLAGS(_1)?\)\s+.*\b(BIND_NOW|NOW)\b", readelf("-d", lib)):
        return set()
    names = set()
    for line in readelf("-r", lib).splitlines():
        f = line.split()
        if len(f) >= 5 and f[2] == "R_X86_64_JUMP_SLOT":
            names.add(f[4].split("@")[0])
    return names


def archive_imports(archive):
    """The functions a static archive's members call that none of its members defines."""
    def names(*args):
        out = subprocess.run(["nm", *args, archive], check=True, capture_output=True, text=True).stdout
        return {f[-1] for f in (line.split() for line in out.splitlines()) if len(f) >= 2 and ":" not in f[-1]}
    return names("-u") - names("--defined-only") - {"_GLOBAL_OFFSET_TABLE_"}


def unwind_archive(src):
    prefix = subprocess.run([os.path.join(src, "scripts", "libunwind.sh")], check=True, capture_output=True,
                            text=True).stdout.strip()
    return os.path.join(prefix, "lib", "libunwind.a")


def marked(src, source):
    with open(os.path.join(src, source), encoding="utf-8") as f:
        head = f.read(4000)
    return "SIGNAL-HANDLER SIDE" in head


def main():
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=here)
    ap.add_argument("--build", default=os.path.join(here, "build", "release"))
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    objs = our_objects(a.src, a.build)
    if not objs:
        print("check_handler: no object files under %s (build first)" % a.build, file=sys.stderr)
        return 2
    seen, external = reachable(objs, ROOTS)
    stub_seen, stub_external = reachable(objs, STUB_ROOTS)
    bad = []
    for (source, fn), via in sorted({**seen, **stub_seen}.items()):
        if source not in HANDLER_FILES:
            bad.append("%s:%s runs in signal context (called from %s) but %s is not a handler file"
                       % (source, fn, via, source))
    for source in sorted(HANDLER_FILES):
        if not marked(a.src, source):
            bad.append("%s is a handler file but its opening comment does not say SIGNAL-HANDLER SIDE" % source)
    for name, callers in sorted({**external, **stub_external}.items()):
        if name not in ALLOWED:
            bad.append("%s is called in signal context (from %s) and is not async-signal-safe"
                       % (name, ", ".join(sorted(callers))))
    lazy = {}
    for name in ("libpyagent.so", "libpyagent-core.so"):
        lib = os.path.join(a.build, "lib", name)
        if not os.path.exists(lib):
            print("check_handler: no %s (build first)" % lib, file=sys.stderr)
            return 2
        lazy[name] = lazily_bound(lib)
    for lib, ext in (("libpyagent-core.so", external), ("libpyagent.so", stub_external)):
        for name, callers in sorted(ext.items()):
            if name in lazy[lib]:
                bad.append("%s is called in signal context (from %s) but %s binds it on first call "
                           "(a PLT call: compile the caller with -fno-plt)" % (name, ", ".join(sorted(callers)), lib))
    for name in sorted(archive_imports(unwind_archive(a.src)) & lazy["libpyagent-core.so"]):
        bad.append("%s is called by libunwind, which unwinds in signal context, but libpyagent-core.so binds it "
                   "on first call (scripts/libunwind.sh must compile with -fno-plt)" % name)
    if a.show:
        for (source, fn), via in sorted(seen.items()):
            print("reachable %s:%s  <- %s" % (source, fn, via))
        for name, callers in sorted(external.items()):
            print("external  %s  <- %s  [%s]" % (name, ", ".join(sorted(callers)), ALLOWED.get(name, "NOT ALLOWED")))
    for line in bad:
        print(line)
    print("check_handler: %d functions reachable from %d roots in %d files, %d external functions: %s"
          % (len(seen) + len(stub_seen), len(ROOTS) + len(STUB_ROOTS), len({s for s, _ in {**seen, **stub_seen}}),
             len(set(external) | set(stub_external)),
             "%d violation(s)" % len(bad) if bad else "all async-signal-safe and bound at load"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
