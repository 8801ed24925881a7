#!/usr/bin/env python3
"""Harmlessness runner: a program must not be able to tell that it is profiled.

Each case (cases/NAME.py) prints what it observes. The runner runs it once without the agent
and once per mode with LD_PRELOAD=libpyagent.so, each in a fresh empty working directory, and
compares the exit status (the signal that ended it and the core-dump flag included), stdout,
stderr and the files created in the working directory.

  run.py --python PY --lib LIB [--mode M]... [CASE...]

Modes: cpu-tick (POSIX thread-CPU timers), cpu-perf (perf task-clock, 1 kHz), wall (1 kHz),
native (250 Hz), and no-output: cpu-tick without PYAGENT_OUTPUT (tick timers: no perf event
descriptor, so it runs on every case, whatever the case's modes). There the profiled program's
own directory may receive its default profiles (pyagent.PID.folded, as documented: the first
profiled process's directory) and nothing else; a case whose children work in other
directories shows those directories' contents itself. The agent's profile goes to a directory outside the working
directory (PYAGENT_OUTPUT=<run dir>/agent/agent.%p.folded); a mode run that leaves no profile
there is a failure too (the agent was not active, so nothing was shown), unless the case's
header says profile=optional.

A case may start with a header line:
  # harmless: modes=cpu-tick,cpu-perf,wall,native timeout=30 env=NAME=VALUE,... profile=optional
A case that cannot set itself up exits with status 99 (SETUP_FAILED): the case fails, since
a comparison of two runs that did nothing shows nothing. C helpers that cases load
(helpers/*.c, built beside the library) are found through PA_HARMLESS_HELPERS, by default the
directory of --lib. Cases named _*.py are helpers, not cases. Prints one line per (case, mode), `same` or the
differences, then `N passed, N failed`; exits 1 on any difference.
"""
import argparse
import difflib
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
AGENT_MODES = ["cpu-tick", "cpu-perf", "wall", "native"]
ALL_MODES = AGENT_MODES + ["no-output"]
SETUP_FAILED = 99

MODE_ENV = {
    "cpu-tick": {"PYAGENT_MODE": "cpu", "PYAGENT_TIMER": "cpu", "PYAGENT_RATE": "1000"},
    "cpu-perf": {"PYAGENT_MODE": "cpu", "PYAGENT_TIMER": "perf", "PYAGENT_RATE": "1000"},
    "wall": {"PYAGENT_MODE": "wall", "PYAGENT_RATE": "1000"},
    "native": {"PYAGENT_MODE": "cpu", "PYAGENT_NATIVE": "1", "PYAGENT_RATE": "250"},
    "no-output": {"PYAGENT_MODE": "cpu", "PYAGENT_TIMER": "cpu", "PYAGENT_RATE": "1000"},
}


def parse_header(path):
    opts = {"modes": list(AGENT_MODES), "timeout": 30.0, "env": {}, "profile": "required"}
    with open(path, encoding="utf-8") as f:
        for _, line in zip(range(20), f):
            line = line.strip()
            if not line.startswith("# harmless:"):
                continue
            for item in line[len("# harmless:"):].split():
                key, _, value = item.partition("=")
                if key == "modes":
                    opts["modes"] = [m for m in value.split(",") if m]
                    bad = [m for m in opts["modes"] if m not in AGENT_MODES]
                    if bad:
                        raise SystemExit(f"{path}: unknown mode(s) {bad}")
                elif key == "timeout":
                    opts["timeout"] = float(value)
                elif key == "env":
                    for pair in value.split(","):
                        name, eq, val = pair.partition("=")
                        if not eq:
                            raise SystemExit(f"{path}: env entry {pair!r} is not NAME=VALUE")
                        opts["env"][name] = val
                elif key == "profile":
                    opts["profile"] = value
                else:
                    raise SystemExit(f"{path}: unknown header key {key!r}")
            break
    return opts


def base_env(extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "LD_PRELOAD" and not k.startswith(("PYAGENT_", "PYROSCOPE_", "PYTHON"))
    }
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def describe(status, timed_out, timeout):
    if timed_out:
        return f"timed out after {timeout:g} s"
    if os.WIFEXITED(status):
        return f"exit status {os.WEXITSTATUS(status)}"
    sig = os.WTERMSIG(status)
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return f"killed by {name}" + (" (core dumped)" if os.WCOREDUMP(status) else "")


def listing(root):
    """Files and directories under root, relative, sorted; core files by name only."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out.append(os.path.normpath(os.path.join(rel, d)) + "/")
        for f in filenames:
            out.append(os.path.normpath(os.path.join(rel, f)))
    return sorted(out)


def run_once(python, case, env, rundir, timeout):
    """Runs the case in rundir/cwd; returns (status text, stdout, stderr, files)."""
    cwd = os.path.join(rundir, "cwd")
    os.makedirs(cwd)
    out_path = os.path.join(rundir, "stdout")
    err_path = os.path.join(rundir, "stderr")
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # its own process group: a timeout ends every process it left
            os.chdir(cwd)
            # Core dumps on, so that "(core dumped)" in the wait status means something.
            resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            fd = os.open(os.devnull, os.O_RDONLY)
            os.dup2(fd, 0)
            os.dup2(os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
            os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            os.closerange(3, 1 << 16)
            os.execve(python, [python, case], env)
        finally:
            os._exit(127)
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    try:
        os.killpg(pid, signal.SIGKILL)  # what the case left running ends with the case
    except ProcessLookupError:
        pass
    with open(out_path, errors="replace") as f:
        out = f.read()
    with open(err_path, errors="replace") as f:
        err = f.read()
    return describe(status, timed_out, timeout), out, err, listing(cwd)


def text_diff(what, a, b):
    lines = list(
        difflib.unified_diff(
            a.splitlines(), b.splitlines(), f"{what} without agent", f"{what} with agent", lineterm="", n=1
        )
    )
    if len(lines) > 40:
        lines = lines[:40] + [f"... ({len(lines) - 40} more lines)"]
    return lines


DEFAULT_PROFILE = re.compile(r"^pyagent\.\d+\.folded$")


def compare(base, got):
    diffs = []
    if base[0] != got[0]:
        diffs.append(f"status: {base[0]} without agent, {got[0]} with agent")
    diffs += text_diff("stdout", base[1], got[1])
    diffs += text_diff("stderr", base[2], got[2])
    if base[3] != got[3]:
        extra = sorted(set(got[3]) - set(base[3]))
        missing = sorted(set(base[3]) - set(got[3]))
        if extra:
            diffs.append("files only with agent: " + ", ".join(extra))
        if missing:
            diffs.append("files only without agent: " + ", ".join(missing))
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--mode", action="append", choices=ALL_MODES, help="default: all")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    os.environ.setdefault("PA_HARMLESS_HELPERS", os.path.dirname(lib))
    modes = args.mode or ALL_MODES
    names = args.cases or sorted(
        f[:-3] for f in os.listdir(CASES) if f.endswith(".py") and not f.startswith("_")
    )
    top = tempfile.mkdtemp(prefix="pyagent-harmless-")
    passed = failed = 0
    for name in names:
        case = os.path.join(CASES, name[:-3] if name.endswith(".py") else name)
        case += ".py"
        if not os.path.exists(case):
            raise SystemExit(f"no case {case}")
        name = os.path.basename(case)[:-3]
        opts = parse_header(case)
        todo = [m for m in modes if m in opts["modes"] or m == "no-output"]
        if not todo:
            continue
        casedir = os.path.join(top, name)
        base = run_once(args.python, case, base_env(opts["env"]), os.path.join(casedir, "none"), opts["timeout"])
        if base[0] == f"exit status {SETUP_FAILED}":
            failed += 1
            print(f"{name}: could not set itself up without the agent: {base[2].strip()}")
            continue
        for mode in todo:
            rundir = os.path.join(casedir, mode)
            agentdir = os.path.join(rundir, "agent")
            os.makedirs(agentdir)
            env = base_env(opts["env"])
            env.update(MODE_ENV[mode])
            env["LD_PRELOAD"] = lib
            if mode != "no-output":
                env["PYAGENT_OUTPUT"] = os.path.join(agentdir, "agent.%p.folded")
            got = run_once(args.python, case, env, rundir, opts["timeout"])
            if mode == "no-output":
                got = got[:3] + ([f for f in got[3] if not DEFAULT_PROFILE.match(f)],)
            diffs = compare(base, got)
            if mode != "no-output" and opts["profile"] != "optional" and not os.listdir(agentdir):
                diffs.append("the agent wrote no profile: it was not active, so this run shows nothing")
            if diffs:
                failed += 1
                print(f"{name} {mode}: differs")
                for d in diffs:
                    print("    " + d)
            else:
                passed += 1
                print(f"{name} {mode}: same")
            sys.stdout.flush()
    if args.keep:
        print(f"run directories kept in {top}")
    else:
        shutil.rmtree(top, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
