"""Ends by a signal whose default action is fatal, as a supervisor or a timer would end it.

  deaths.py self SIG      burns CPU in doomed_burn(), then sends itself SIG
  deaths.py self-dfl SIG  the same after signal.signal(SIG, SIG_DFL) (for SIGINT, which
                          Python handles by default)
  deaths.py alarm         burns 1 s of CPU, then signal.alarm(1) and burns until SIGALRM ends it
  deaths.py outside SIG   starts itself (`burn`) as a child, sends it SIG after 1 s of its CPU
                          time, prints the child's status; the child's profile is the one
  deaths.py outside-dfl SIG as outside, the child having set SIG to SIG_DFL first
  deaths.py outside-c SIG the same, but the child burns 0.5 s in doomed_burn(), then 0.5 s
                          of CPU in zlib's C code (not the interpreter's), where SIG finds it
  deaths.py handler       its own SIGTERM handler prints and exits 3 (behaviour unchanged)
  deaths.py pool METHOD   with Pool(2) as p: p.map(mapped_burn, ...): the pool terminates its
                          workers with SIGTERM on leaving the with block"""
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def doomed_burn(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def mapped_burn(i):
    doomed_burn(0.25)
    return i


def main():
    what = sys.argv[1]
    if what.endswith("-dfl") or what == "burn-dfl":
        signal.signal(getattr(signal, sys.argv[2]), signal.SIG_DFL)
        what = what[:-4]
    if what == "self":
        doomed_burn(1.0)
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
        time.sleep(5)
        print("still alive")
    elif what == "alarm":
        doomed_burn(1.0)
        signal.alarm(1)
        doomed_burn(30)
        print("still alive")
    elif what == "burn":
        print("ready", flush=True)
        doomed_burn(30)
    elif what == "burn-c":
        import zlib
        data = os.urandom(1 << 20)
        doomed_burn(0.5)
        print("ready", flush=True)
        while True:
            zlib.compress(data, 9)
    elif what in ("outside", "outside-c"):
        child = "burn" if what == "outside" else "burn-c"
        if sys.argv[1] == "outside-dfl":
            child = "burn-dfl"
        p = subprocess.Popen([sys.executable, sys.argv[0], child, sys.argv[2]], stdout=subprocess.PIPE)
        p.stdout.readline()
        with open("pids.txt", "w") as f:
            f.write("%d\n" % p.pid)
        # Let it burn a second of CPU (its own clock, whatever the machine's load); outside-c:
        # half a second in zlib after it said it is ready.
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu():
            with open("/proc/%d/stat" % p.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        until = 1.0 if what == "outside" else cpu() + 0.5
        while cpu() < until:
            time.sleep(0.05)
        p.send_signal(getattr(signal, sys.argv[2]))
        rc = p.wait()
        print("child", "killed by " + signal.Signals(-rc).name if rc < 0 else "exit %d" % rc)
    elif what == "handler":
        def on_term(sig, frame):
            print("own handler", sig, flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, on_term)
        print("getsignal is ours:", signal.getsignal(signal.SIGTERM) is on_term)
        doomed_burn(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    elif what == "pool":
        ctx = multiprocessing.get_context(sys.argv[2])
        with ctx.Pool(2) as p:
            got = p.map(mapped_burn, range(8), chunksize=1)
        print(sum(got))
        with open("pids.txt", "w") as f:
            f.write("%d\n" % os.getpid())


if __name__ == "__main__":
    main()
