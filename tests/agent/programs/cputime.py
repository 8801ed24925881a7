"""Burns CPU in two threads until the process's own CPU clock has used argv[2] seconds, then
writes what it measured of itself to the JSON file named by argv[1]: time.process_time()
and getrusage's user and system time, read last, just before exit."""
import json
import resource
import sys
import threading
import time

SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0


def burn():
    x = 0
    while time.process_time() < SECONDS:
        for i in range(5000):
            x += i * i
    return x


t = threading.Thread(target=burn, name="Burner")
t.start()
burn()
t.join()
ru = resource.getrusage(resource.RUSAGE_SELF)
truth = {"process_time": time.process_time(), "utime": ru.ru_utime, "stime": ru.ru_stime}
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
