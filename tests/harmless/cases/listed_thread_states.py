# harmless: timeout=60
"""The interpreter's list of thread states holds the program's threads only. A thread started
in C that never runs Python (faulthandler's watchdog, which dump_traceback_later starts) has no
Python name for the agent to find, and the agent must not make itself a thread state
(PyGILState_Ensure) to look for one, again and again: such a state shows in faulthandler's
dumps of every thread (CPython 3.14's test_faulthandler once printed "<freed thread state>"
where one vanished mid-dump), in sys._current_frames() and to any walk of the list. The main
thread counts the states for 3.5 s, each count one C call that keeps the GIL (helpers/
tstates.c), so that a state another thread made while it waits for the GIL is seen."""
import faulthandler
import time

from _util import helper

lib = helper("tstates", keep_gil=True)
faulthandler.dump_traceback_later(600)  # its watchdog thread: started in C, never runs Python
seen = {}
end = time.monotonic() + 3.5
while time.monotonic() < end:
    n = lib.count_thread_states()
    seen[n] = seen.get(n, 0) + 1
faulthandler.cancel_dump_traceback_later()
print("thread states seen:", sorted(seen))
