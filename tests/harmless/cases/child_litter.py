# harmless: timeout=60
"""Harm 12: a Python helper that a profiled program runs in a scratch directory must not
leave a profile there. The first profiled process (here `parent`, started in `home`, with no
PYAGENT_OUTPUT of its own) decides where profiles go; its children, whatever their working
directory, write there too and never into `scratch`."""
import os
import shutil
import subprocess
import sys
import tempfile

work = tempfile.mkdtemp(prefix="harmless-litter-")
try:
    home = os.path.join(work, "home")
    scratch = os.path.join(work, "scratch")
    os.mkdir(home)
    os.mkdir(scratch)
    env = dict(os.environ)
    env.pop("PYAGENT_OUTPUT", None)
    parent = ("import subprocess, sys; "
              "subprocess.run([sys.executable, '-c', 'sum(range(100000))'], cwd=%r, check=True)"
              % scratch)
    r = subprocess.run([sys.executable, "-c", parent], cwd=home, env=env, timeout=30)
    print("parent exit", r.returncode)
    print("left in scratch:", sorted(os.listdir(scratch)))
finally:
    shutil.rmtree(work)
