/* dump.c: the agent thread's side of `pyagent dump` and `pyagent top` (see dump.h).
 *
 * One idea: the process answers for itself, so no ptrace rights are needed, and the answer
 * is read the way wall mode's tick reads a waiting thread (guarded reads, no GIL), so a
 * program stuck in a C call or deadlocked on the GIL still answers. Everything here runs on
 * the agent thread, in its private descriptor table: the socket and the client's connection
 * never take a number in the program's table. */
#include "dump.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../agent/codecache.h"
#include "../agent/frames.h"
#include "../agent/handler.h"
#include "../agent/sampler.h"
#include "../agent/awaits.h"
#include "../agent/tasks.h"
#include "../base/clock.h"
#include "../base/log.h"

enum { MAX_THREADS = 4096 };

int pa_dump_listen(void) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, PA_DUMP_SOCKET_FMT, (int)getpid());
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        pa_log(PA_LOG_DEBUG, "pyagent dump: no socket: %s", strerror(errno));
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 8) != 0) {
        pa_log(PA_LOG_DEBUG, "pyagent dump: cannot listen on @%s: %s", a.sun_path + 1,
               strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* The answer, built in memory before it is sent: bounded by PA_DUMP_ANSWER_MAX. */
struct answer {
    char *buf;
    size_t len, cap;
    int full;
};

static void put(struct answer *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct answer *a, const char *fmt, ...) {
    if (a->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(a->buf + a->len, a->cap - a->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= a->cap - a->len)
        a->full = 1; /* the caller rolls back to the last whole thread */
    else
        a->len += (size_t)n;
}

/* A name on one line of the protocol: no control characters, no tab. */
static const char *clean(const char *s, char *out, size_t len) {
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    out[i] = 0;
    return out;
}

static void put_frames(struct answer *a, const struct pa_frame *frames, int depth, int from);

static void put_thread(struct answer *a, const struct pa_thread_info *t, struct pa_frame *frames,
                       int max) {
    char name[128], q[512];
    pa_threads_name(t->serial, name, sizeof name);
    put(a, "thread %d %s\n", (int)t->tid, clean(name, q, sizeof q));
    int depth = pa_sampler_stack_now(t->tid, t->pthread, frames, max);
    const char *state = "running";
    int from = 0;
    if (depth <= 0) {
        put(a, "state none\n");
        return;
    }
    if (frames[0].id == PA_SYN_IDLE || frames[0].id == PA_SYN_GIL_WAIT) {
        state = frames[0].id == PA_SYN_IDLE ? "idle" : "gil";
        from = 1;
    }
    put(a, "state %s\n", state);
    put_frames(a, frames, depth, from);
}

/* Frames from out[depth - 1] (the root) down to out[from], one line each. */
static void put_frames(struct answer *a, const struct pa_frame *frames, int depth, int from) {
    char q[512], f[1024];
    for (int i = depth - 1; i >= from; i--) {
        uint32_t id = frames[i].id;
        if (id == PA_SYN_INTERP)
            put(a, "frame 0\tinterp:%d\t\n", frames[i].line);
        else if (id == PA_SYN_LABELS || id == PA_SYN_SPAN || id == PA_SYN_SPAN_NAME)
            continue; /* the request's labels are the profile's business, not a stack's */
        else if (id == PA_SYN_TASK) {
            char t[96];
            pa_task_frame_name(&frames[i], t, sizeof t);
            put(a, "frame 0\t%s\t\n", clean(t, q, sizeof q));
        } else if (id == PA_SYN_AWAIT)
            put(a, "frame 0\t%s\t\n", pa_await_name(frames[i].line));
        else if (id < PA_SYN_FIRST_CODE)
            put(a, "frame 0\t%s\t\n", pa_code_synthetic_name(id));
        else
            put(a, "frame %d\t%s\t%s\n", frames[i].line > 0 ? frames[i].line : 0,
                clean(pa_code_qualname(id), q, sizeof q), clean(pa_code_filename(id), f, sizeof f));
    }
}

/* pyagent dump --async: each task as "task TID NAME", "state running|waiting" and, for a
 * waiting one, its await chain root first, its leaf the state it waits in. A running task's
 * frames are its thread's. */
struct task_answer {
    struct answer *a;
    struct pa_thread_info *threads;
    size_t nthreads;
    size_t last_whole; /* the answer's length after the last whole task */
};

static void put_task(void *arg, unsigned long pthread, const struct pa_frame *frames, int depth,
                     int running) {
    struct task_answer *t = arg;
    struct answer *a = t->a;
    if (a->full)
        return;
    int tid = 0;
    for (size_t i = 0; i < t->nthreads; i++)
        if (t->threads[i].pthread == pthread && t->threads[i].alive)
            tid = (int)t->threads[i].tid;
    char name[96], q[128];
    pa_task_frame_name(&frames[depth - 1], name, sizeof name);
    put(a, "task %d %s\n", tid, clean(name + 5 /* "task:" */, q, sizeof q));
    put(a, "state %s\n", running ? "running" : "waiting");
    if (!running)
        put_frames(a, frames, depth - 1, 0);
    if (!a->full)
        t->last_whole = a->len;
}

/* Every registered thread that is alive, as its stack is now (and every task with tasks). */
static void answer_stacks(struct answer *a, const char *python_version, int mode, int tasks) {
    static const char *const modes[] = {"cpu", "wall", "gil"};
    struct pa_thread_info *threads = malloc(MAX_THREADS * sizeof *threads);
    struct pa_frame *frames = malloc(PA_MAX_DEPTH_LIMIT * sizeof *frames);
    if (!threads || !frames) {
        put(a, PA_DUMP_PROTOCOL " error out of memory in the agent\n");
        goto out;
    }
    size_t n = pa_threads_list(threads, MAX_THREADS);
    n = n < MAX_THREADS ? n : MAX_THREADS;
    /* A first walk tells a process whose interpreter is not ready from one with no thread. */
    if (n > 0 && pa_sampler_stack_now(threads[0].tid, threads[0].pthread, frames, 2) < 0) {
        put(a, PA_DUMP_PROTOCOL " error the interpreter is starting or finalizing; try again\n");
        goto out;
    }
    put(a, PA_DUMP_PROTOCOL " ok pid=%d python=%s mode=%s\n", (int)getpid(), python_version,
        modes[mode >= 0 && mode < 3 ? mode : 0]);
    int max = (int)pa_handler_config()->max_depth;
    size_t cap = a->cap;
    a->cap -= 32; /* room for "truncated" and "end" */
    int cut = 0;
    for (size_t i = 0; i < n && !cut; i++) {
        if (!threads[i].alive)
            continue;
        size_t before = a->len;
        put_thread(a, &threads[i], frames, max);
        if (a->full) {
            a->len = before;
            a->full = 0;
            cut = 1;
        }
    }
    if (tasks && !cut) {
        struct task_answer t = {a, threads, n, a->len};
        pa_sampler_tasks_now(put_task, &t);
        if (a->full) {
            a->len = t.last_whole;
            a->full = 0;
            cut = 1;
        }
    }
    a->cap = cap;
    if (cut)
        put(a, "truncated\n");
    put(a, "end\n");
out:
    free(threads);
    free(frames);
}

static long ms_left(uint64_t deadline_ns) {
    uint64_t now = pa_mono_ns();
    return now >= deadline_ns ? 0 : (long)((deadline_ns - now) / 1000000) + 1;
}

/* Waits for fd to be ready for events until the deadline: 1, or 0 when the time is up. */
static int wait_for(int fd, short events, uint64_t deadline_ns) {
    for (;;) {
        struct pollfd p = {fd, events, 0};
        long left = ms_left(deadline_ns);
        if (left == 0)
            return 0;
        int r = poll(&p, 1, (int)left);
        if (r > 0)
            return 1;
        if (r == 0 || errno != EINTR)
            return 0;
    }
}

static void send_all(int fd, const char *p, size_t len, uint64_t deadline_ns) {
    while (len > 0 && wait_for(fd, POLLOUT, deadline_ns)) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return;
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        }
    }
}

/* The request line, or "" when the client sent none in time (or too long a one). */
static void read_request(int fd, char *line, size_t cap, uint64_t deadline_ns) {
    size_t len = 0;
    line[0] = 0;
    while (len + 1 < cap && wait_for(fd, POLLIN, deadline_ns)) {
        ssize_t n = recv(fd, line + len, cap - 1 - len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (n > 0)
            len += (size_t)n;
        line[len] = 0;
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = 0;
            return;
        }
    }
    line[0] = 0;
}

void pa_dump_serve(int listener, const char *python_version, int mode) {
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    uint64_t deadline = pa_mono_ns() + (uint64_t)PA_DUMP_TIMEOUT_MS * 1000000;
    struct answer a = {NULL, 0, 0, 0};
    struct ucred cred;
    socklen_t clen = sizeof cred;
    char line[PA_DUMP_REQUEST_MAX + 1];
    int known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0;
    int allowed = known && (cred.uid == 0 || cred.uid == geteuid());
    /* The request is read first, whoever asks: a socket closed with unread data resets the
     * connection, and the client would see that instead of the answer. Another user gets
     * 100 ms for it, so that it cannot keep the agent thread waiting. */
    uint64_t soon = pa_mono_ns() + 100000000ULL;
    read_request(fd, line, sizeof line, allowed || soon > deadline ? deadline : soon);
    if (!known) {
        static const char msg[] = PA_DUMP_PROTOCOL " error the agent cannot tell who asks\n";
        send_all(fd, msg, sizeof msg - 1, deadline);
    } else if (!allowed) {
        /* Another user's process: told so, and nothing else. */
        char msg[160];
        int n = snprintf(msg, sizeof msg,
                         PA_DUMP_PROTOCOL
                         " error refused: uid %u is neither this process's user nor root\n",
                         (unsigned)cred.uid);
        send_all(fd, msg, (size_t)n, deadline);
    } else if (strcmp(line, PA_DUMP_PROTOCOL " stacks") != 0 &&
               strcmp(line, PA_DUMP_PROTOCOL " stacks tasks") != 0) {
        char msg[PA_DUMP_REQUEST_MAX + 80];
        char shown[PA_DUMP_REQUEST_MAX + 1];
        int n = snprintf(msg, sizeof msg, PA_DUMP_PROTOCOL " error unknown request '%s'\n",
                         clean(line, shown, sizeof shown));
        send_all(fd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, deadline);
    } else if ((a.buf = malloc(PA_DUMP_ANSWER_MAX)) != NULL) {
        a.cap = PA_DUMP_ANSWER_MAX;
        answer_stacks(&a, python_version, mode, strcmp(line, PA_DUMP_PROTOCOL " stacks") != 0);
        send_all(fd, a.buf, a.len, deadline);
    }
    free(a.buf);
    close(fd);
}
