# harmless: timeout=60 env=PYAGENT_SERVER=http://127.0.0.1:9,PYAGENT_LOG=error
"""fork_from_worker while uploading (a server is configured; it refuses): in the child forked
from a worker thread, the agent's upload thread must not keep the process alive either once
the child's last thread has left with pthread_exit."""
import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fork_from_worker.py"),
               run_name="__main__")
