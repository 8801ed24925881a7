/* dump.h: the channel `pyagent dump` and `pyagent top` ask a running process through.
 *
 * The agent thread listens on an abstract Unix socket named from the process id, in its own
 * descriptor table (so the program's never shows it), and answers one request per
 * connection: the stack of every thread, read now without the GIL. The peer's credentials
 * decide who may ask (the same user, or root); the client checks the listener's, so a socket
 * of that name made by another process is never believed. docs/architecture.md, "pyagent
 * dump and top", has the design; the protocol:
 *
 *   request:  "pyagent 1 stacks\n", or "pyagent 1 stacks tasks\n" (at most PA_DUMP_REQUEST_MAX)
 *   answer:   "pyagent 1 ok pid=P python=X.Y.Z mode=cpu\n"
 *             per thread "thread TID NAME\n", "state running|idle|gil|none\n",
 *             then its frames root first, "frame LINE\tQUALNAME\tFILE\n" (LINE 0: none;
 *             a synthetic frame has an empty FILE); with tasks, then per asyncio task
 *             "task TID NAME\n" (TID of its loop's thread, 0: none), "state running|waiting\n"
 *             and a waiting one's await chain as frames, its leaf <await X> or <ready>;
 *             "end\n" after the last;
 *             or one line "pyagent 1 error MESSAGE\n".
 * Names hold no control characters (replaced by '?'). An answer is at most PA_DUMP_ANSWER_MAX
 * bytes: beyond, the threads that did not fit are left out and the last line before "end" is
 * "truncated". */
#ifndef PA_DUMP_H
#define PA_DUMP_H

#define PA_DUMP_SOCKET_FMT "pyagent.%d" /* abstract: a leading NUL, then this */
#define PA_DUMP_PROTOCOL "pyagent 1"
enum {
    PA_DUMP_REQUEST_MAX = 256,
    PA_DUMP_ANSWER_MAX = 4 << 20,
    PA_DUMP_TIMEOUT_MS = 2000, /* one client's whole exchange, either side */
};

/* The agent thread, in its own descriptor table: the listening socket (non-blocking), or -1
 * (turned off, the name is taken, or sockets are refused; said in the log at debug level). */
int pa_dump_listen(void);

/* The agent thread, when the listener is readable: accepts one client and answers it, in at
 * most PA_DUMP_TIMEOUT_MS, so a client that stalls cannot hold the agent thread. */
void pa_dump_serve(int listener, const char *python_version, int mode);

#endif
