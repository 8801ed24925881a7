"""Known CPU work in a sub-interpreter and in the main interpreter, for the sub-interpreter
tests (test_agent.py subinterpreters, subinterpreter_churn).

    subinterp.py split OUT.json [high]
                                  a thread runs sub_burn() in a new sub-interpreter (own GIL
                                  where the version has one) while the main thread runs
                                  main_burn(); OUT.json gets each one's thread CPU time and
                                  the sub-interpreter's id. high: through 3.14's
                                  concurrent.interpreters (Interpreter.exec in a thread)
    subinterp.py churn N OUT.json creates, runs a little code in and destroys N
                                  sub-interpreters, half from the main thread and half from
                                  a thread, in two batches; OUT.json gets VmRSS after each
    subinterp.py pool OUT.json    3.14+: InterpreterPoolExecutor(2) runs pool_burn tasks

The low-level module is _xxsubinterpreters on 3.12 and _interpreters from 3.13."""
import json
import sys
import threading

try:
    import _interpreters as low
except ImportError:
    import _xxsubinterpreters as low

# One busy loop, defined under each name the tests look for: a fixed amount of this thread's
# CPU time, returned as measured.
BURN = """
def %s(seconds):
    import time
    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < seconds:
        for i in range(2000):
            x += i * i
    return time.thread_time() - t0
"""
exec(BURN % "main_burn")
exec(BURN % "pool_burn")
SUB_CODE = BURN % "sub_burn" + """
spent = sub_burn(%r)
with open(%r, "w") as f:
    f.write(repr(spent))
"""


def create():
    try:
        return low.create(isolated=True)  # 3.12: own GIL
    except TypeError:
        return low.create()  # 3.13+: isolated by default


def run(interp, code):
    if hasattr(low, "exec"):
        err = low.exec(interp, code)
        if err is not None:
            raise RuntimeError("sub-interpreter failed: %r" % (err,))
    else:
        low.run_string(interp, code)


def interp_id(interp):
    return int(interp[0] if isinstance(interp, tuple) else interp)


def split(out, api):
    spent_file = out + ".sub"
    code = SUB_CODE % (1.5, spent_file)
    if api == "high":
        from concurrent import interpreters
        interp = interpreters.create()
        ident, target, args, destroy = interp.id, interp.exec, (code,), interp.close
    else:
        interp = create()
        ident, target, args = interp_id(interp), run, (interp, code)
        destroy = lambda: low.destroy(interp)  # noqa: E731
    t = threading.Thread(target=target, args=args, name="subworker")
    t.start()
    main_cpu = main_burn(1.0)
    t.join()
    with open(spent_file) as f:
        sub_cpu = float(f.read())
    destroy()
    with open(out, "w") as f:
        json.dump({"main": main_cpu, "sub": sub_cpu, "id": ident}, f)


def vm_rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def churn(n, out):
    def some(k):
        for i in range(k):
            interp = create()
            run(interp, "x = sum(i * i for i in range(20000))")
            low.destroy(interp)

    def batch(k):
        some(k // 2)
        t = threading.Thread(target=some, args=(k - k // 2,))
        t.start()
        t.join()
    batch(n // 2)
    half = vm_rss_kb()
    batch(n - n // 2)
    with open(out, "w") as f:
        json.dump({"half": half, "all": vm_rss_kb()}, f)
    print("churned", n)


def pool(out):
    from concurrent.futures import InterpreterPoolExecutor
    with InterpreterPoolExecutor(2) as ex:
        spent = list(ex.map(pool_burn, [0.3] * 4))
    with open(out, "w") as f:
        json.dump({"pool": sum(spent)}, f)


if __name__ == "__main__":
    {"split": lambda: split(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "low"), "churn": lambda: churn(int(sys.argv[2]), sys.argv[3]),
     "pool": lambda: pool(sys.argv[2])}[sys.argv[1]]()
