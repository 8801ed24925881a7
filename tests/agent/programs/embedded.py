"""Run by tests/agent/embed_late.c inside a C program that loaded libpython with dlopen:
burns CPU in embedded_burn(), forks a worker that burns in worker_burn() and ends with
os._exit, as a prefork server's worker would. Prints how the worker ended; writes the pids to pids.txt
(parent first)."""
import os
import time


def burn(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def embedded_burn():
    burn(1.0)


def worker_burn():
    burn(1.0)


embedded_burn()
pid = os.fork()
if pid == 0:
    worker_burn()
    os._exit(0)
_, status = os.waitpid(pid, 0)
# How the worker ended, on stdout: the tests compare it with a run without the agent.
print("worker:", "exit status %d" % os.WEXITSTATUS(status) if os.WIFEXITED(status)
      else "killed by signal %d" % os.WTERMSIG(status))
with open("pids.txt", "w") as f:
    f.write("%d %d\n" % (os.getpid(), pid))
