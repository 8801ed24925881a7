"""fork, multiprocessing (fork and spawn), subprocesses running Python and non-Python
programs. stdout is deterministic; the pids of Python processes go to argv[1]."""
import multiprocessing as mp
import os
import subprocess
import sys
import time

pids = [os.getpid()]


def burn(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def task(q):
    burn(0.3)
    q.put(os.getpid())


if __name__ == "__main__":
    pid = os.fork()
    if pid == 0:
        burn(0.3)
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    pids.append(pid)
    print("fork child exit", os.WEXITSTATUS(status))

    # Many short children exiting at once through os._exit, while the agent starts up in
    # each: every status must come back as the child set it.
    statuses, quick = [], []
    for i in range(20):
        pid = os.fork()
        if pid == 0:
            burn(0.02)
            os._exit(i % 7)
        _, status = os.waitpid(pid, 0)
        pids.append(pid)
        quick.append(pid)
        statuses.append(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
    print("quick fork statuses", statuses == [i % 7 for i in range(20)])

    for method in ("fork", "spawn"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        procs = [ctx.Process(target=task, args=(q,)) for _ in range(2)]
        for p in procs:
            p.start()
        got = sorted(q.get() for _ in procs)
        for p in procs:
            p.join()
        pids.extend(got)
        print(method, "exit codes", [p.exitcode for p in procs])
        if method == "spawn":
            from multiprocessing import resource_tracker

            rt = getattr(resource_tracker._resource_tracker, "_pid", None)
            if rt:
                pids.append(rt)

    r = subprocess.run(
        [sys.executable, "-c", "import os,sys,time\nt=time.thread_time()+0.3\nwhile time.thread_time()<t: pass\nprint(os.getpid()); sys.exit(5)"],
        capture_output=True, text=True)
    pids.append(int(r.stdout.strip()))
    print("python child exit", r.returncode)
    r = subprocess.run(["/bin/sh", "-c", "echo from-sh; exit 4"], capture_output=True, text=True)
    print("sh", r.stdout.strip(), r.returncode)
    r = subprocess.run(["ls", "/"], capture_output=True, text=True)
    print("ls ok", r.returncode, "bin" in r.stdout.split())
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(str(p) for p in pids))
    with open(sys.argv[1] + ".quick", "w") as f:
        f.write("\n".join(str(p) for p in quick))
    burn(0.3)
    print("processes done")
    sys.exit(7)
