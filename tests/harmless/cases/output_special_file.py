# harmless: timeout=60
"""Harm 11: PYAGENT_OUTPUT naming something that is not a regular file (a FIFO, a link to
/dev/null) must leave it as it is. A child Python is started with PYAGENT_OUTPUT set to each;
afterwards the paths must still be what they were. Without the agent the variable means
nothing, so both runs print the same."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

work = tempfile.mkdtemp(prefix="harmless-output-")
try:
    fifo = os.path.join(work, "fifo")
    os.mkfifo(fifo)
    null = os.path.join(work, "null")
    os.symlink("/dev/null", null)
    for path in (fifo, null):
        env = dict(os.environ, PYAGENT_OUTPUT=path)
        r = subprocess.run([sys.executable, "-c", "sum(range(100000))"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        st = os.lstat(path)
        kind = ("fifo" if stat.S_ISFIFO(st.st_mode) else "symlink" if stat.S_ISLNK(st.st_mode)
                else "regular" if stat.S_ISREG(st.st_mode) else "other")
        print(os.path.basename(path), "child exit", r.returncode, "is still a", kind)
    print("/dev/null is a character device:", stat.S_ISCHR(os.stat("/dev/null").st_mode))
    print("left in the directory:", sorted(os.listdir(work)))
finally:
    shutil.rmtree(work)
