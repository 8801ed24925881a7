"""Runs argv[1] seconds of CPU in code whose names break naive encoders: a thread whose name
(80 bytes of UTF-8) is cut by the agent's 64-byte thread record in the middle of a character,
and a function whose qualname (1600 bytes of two-byte characters) is cut by the frame buffer;
file and function names with ';', '{', '}', ',' and a newline. Prints a deterministic line."""
import sys
import threading
import time

SECONDS = float(sys.argv[1])


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


long_name = "\u00fc" * 800
ns = {"spin": spin}
exec(compile("def %s(s):\n    spin(s)\n" % long_name, "odd;{file},name\n.py", "exec"), ns)
deep = ns[long_name]
t = threading.Thread(target=deep, args=(SECONDS / 2,), name="\u00e9" * 40)
t.start()
deep(SECONDS / 2)
t.join()
print("hostile done")
