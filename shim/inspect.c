/* inspect.c: pyagent-inspect, the client of `pyagent dump PID` and `pyagent top PID`.
 *
 * It asks the agent inside the process (shim/dump.h), so it needs no ptrace rights: the
 * process answers for itself, to its own user or root. It trusts an answer only from a
 * listener that the kernel says is process PID (SO_PEERCRED), and reads the source lines
 * itself: the agent sends names and numbers, never file contents. `top` samples the same
 * answer ten times a second and counts functions over a sliding window. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "dump.h"

static const char usage_text[] =
    "NAME\n"
    "    pyagent-inspect - every thread's Python stack of a profiled process, now or live\n"
    "\n"
    "SYNOPSIS\n"
    "    pyagent dump [--async] PID\n"
    "    pyagent top PID\n"
    "\n"
    "DESCRIPTION\n"
    "    dump     prints every thread of process PID: its name, what it waits in, and its\n"
    "             Python frames, most recent call last, with file, line and the source line,\n"
    "             as a traceback does. It works while the program is inside a C call or\n"
    "             deadlocked on the GIL. With --async, then every asyncio task (3.11+): the\n"
    "             thread of its event loop, whether it runs, and a waiting task's await\n"
    "             chain, its coroutines outermost first and last what it waits on\n"
    "             (<await sleep>, <await lock>, <await Future>, or <ready> to run).\n"
    "    top      a live view of PID: functions by self and total share of the samples of\n"
    "             the last 10 seconds (ten a second), refreshed every second. Keys: s sort by\n"
    "             self, t sort by total, n next thread, a all threads, i count waiting threads\n"
    "             too (on/off), q quit. Below it, asyncio tasks: the share of the window\n"
    "             each task ran and waited, and what it waited on most.\n"
    "\n"
    "    The process must run under libpyagent.so, which answers through an abstract Unix\n"
    "    socket its agent thread listens on (PYAGENT_DUMP, docs/configuration.md): no ptrace\n"
    "    rights are needed, and only the process's own user or root is answered. A process\n"
    "    in another network namespace (a container) is reached when this runs as root;\n"
    "    otherwise run it under `nsenter -t PID -n`.\n"
    "\n"
    "EXIT STATUS\n"
    "    0 when the process answered; 1 when it did not (no such process, no agent, another\n"
    "    user's, an error; one line on stderr); 2 for a usage error.\n";

static int target;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pyagent: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* ---- the channel -------------------------------------------------------------------------- */

/* Abstract sockets belong to a network namespace: root enters the process's; another user is
 * told how to. */
static void enter_netns(int pid) {
    char mine[64] = "", theirs[64] = "", path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", pid);
    if (readlink("/proc/self/ns/net", mine, sizeof mine - 1) < 0 ||
        readlink(path, theirs, sizeof theirs - 1) < 0 || strcmp(mine, theirs) == 0)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
        die("process %d runs in another network namespace; run this as root or under "
            "`nsenter -t %d -n`",
            pid, pid);
    close(fd);
}

/* The process id the process knows itself by, which names its socket: in a PID namespace of
 * its own (a container) the last one of /proc/PID/status's NSpid line. */
static int own_pid(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    int inner = pid;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "NSpid:", 6)) {
            char *last = strrchr(line, '\t');
            inner = last ? atoi(last + 1) : pid;
            break;
        }
    if (f)
        fclose(f);
    return inner > 0 ? inner : pid;
}

/* One request (with tasks: every asyncio task too), its whole answer (NUL-terminated), or
 * exit with the reason. */
static char *ask(int pid, int tasks, size_t *len_out) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, PA_DUMP_SOCKET_FMT, own_pid(pid));
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("cannot make a socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&a, alen) != 0) {
        if (kill(pid, 0) != 0 && errno == ESRCH)
            die("no process %d", pid);
        die("process %d does not answer: it is not running under pyagent, or its listener is "
            "off (PYAGENT_DUMP=0; a single-threaded program that does not upload needs "
            "PYAGENT_DUMP=1)",
            pid);
    }
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.pid != pid)
        die("the socket @%s is held by process %d, not %d; not trusting it", a.sun_path + 1,
            (int)cred.pid, pid);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const char *req = tasks ? PA_DUMP_PROTOCOL " stacks tasks\n" : PA_DUMP_PROTOCOL " stacks\n";
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0 && errno != EPIPE)
        die("process %d: cannot send the request: %s", pid, strerror(errno));
    size_t cap = PA_DUMP_ANSWER_MAX + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        die("out of memory");
    for (;;) {
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && len > 0 && errno == ECONNRESET)
            break; /* what came before the reset is the answer */
        if (r < 0)
            die("process %d: no answer: %s", pid, strerror(errno));
        if (r == 0 || (len += (size_t)r) == cap - 1)
            break;
    }
    close(fd);
    buf[len] = 0;
    const char *err = PA_DUMP_PROTOCOL " error ";
    if (strncmp(buf, err, strlen(err)) == 0) {
        buf[strcspn(buf, "\n")] = 0;
        die("process %d: %s", pid, buf + strlen(err));
    }
    if (strncmp(buf, PA_DUMP_PROTOCOL " ok", strlen(PA_DUMP_PROTOCOL " ok")) != 0 ||
        !strstr(buf, "\nend\n"))
        die("process %d: an answer this pyagent cannot read (another version?)", pid);
    *len_out = len;
    return buf;
}

/* ---- source lines ------------------------------------------------------------------------- */

/* Line `line` of the file, leading blanks and the newline stripped, or "" (no such file or
 * line). The last file read stays open: a stack's frames often share one. */
static const char *source_line(const char *file, int line) {
    static char last[4096];
    static FILE *f;
    static int at; /* lines read from f so far */
    static char *buf;
    static size_t cap;
    if (line <= 0 || !file[0])
        return "";
    if (!f || strcmp(file, last) != 0 || line <= at) {
        if (f)
            fclose(f);
        snprintf(last, sizeof last, "%s", file);
        f = fopen(file, "re");
        at = 0;
        if (!f)
            return "";
    }
    ssize_t n = 0;
    while (at < line && (n = getline(&buf, &cap, f)) >= 0)
        at++;
    if (at < line || n < 0) {
        fclose(f);
        f = NULL;
        return "";
    }
    buf[strcspn(buf, "\r\n")] = 0;
    char *s = buf;
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* ---- dump --------------------------------------------------------------------------------- */

static const char *state_words(const char *state) {
    if (!strcmp(state, "idle"))
        return "waiting in a system call";
    if (!strcmp(state, "gil"))
        return "waiting for the GIL";
    if (!strcmp(state, "none"))
        return "no Python frames";
    return "running";
}

static int dump(int pid, int tasks) {
    size_t len;
    char *answer = ask(pid, tasks, &len);
    char *save, *ln = strtok_r(answer, "\n", &save);
    char python[64] = "?", mode[16] = "?";
    const char *p = strstr(ln, "python=");
    if (p)
        sscanf(p, "python=%63s", python);
    if ((p = strstr(ln, "mode=")))
        sscanf(p, "mode=%15s", mode);
    printf("Process %d: Python %s, profiled by pyagent (%s mode)\n", pid, python, mode);
    char name[512] = "";
    int tid = 0, task = 0, ntasks = 0;
    while ((ln = strtok_r(NULL, "\n", &save))) {
        if (!strncmp(ln, "thread ", 7) || !strncmp(ln, "task ", 5)) {
            int off = 0, at = ln[1] == 'h' ? 7 : 5;
            task = at == 5;
            if (sscanf(ln + at, "%d %n", &tid, &off) >= 1)
                snprintf(name, sizeof name, "%s", ln + at + off);
        } else if (!strncmp(ln, "state ", 6) && task) {
            char where[64] = "no running loop";
            if (tid)
                snprintf(where, sizeof where, "thread %d", tid);
            if (!ntasks++)
                printf("\nasyncio tasks:\n");
            if (!strcmp(ln + 6, "running"))
                printf("\nTask \"%s\" (%s), running: its frames are its thread's\n", name, where);
            else
                printf("\nTask \"%s\" (%s), waiting, most recent await last:\n", name, where);
        } else if (!strncmp(ln, "state ", 6)) {
            printf("\nThread %d \"%s\" (%s), most recent call last:\n", tid, name,
                   state_words(ln + 6));
        } else if (!strncmp(ln, "frame ", 6)) {
            char *f = ln + 6, *q = strchr(f, '\t'), *file = q ? strchr(q + 1, '\t') : NULL;
            if (!q || !file)
                continue;
            *q++ = 0;
            *file++ = 0;
            int line = atoi(f);
            if (!file[0]) {
                printf("  %s\n", q);
                continue;
            }
            if (line > 0)
                printf("  File \"%s\", line %d, in %s\n", file, line, q);
            else
                printf("  File \"%s\", in %s\n", file, q);
            const char *src = source_line(file, line);
            if (src[0])
                printf("    %s\n", src);
        } else if (!strcmp(ln, "truncated")) {
            printf("\n(more threads: the answer was cut at %d MiB)\n", PA_DUMP_ANSWER_MAX >> 20);
        }
    }
    if (tasks && !ntasks)
        printf("\nasyncio tasks: none\n");
    free(answer);
    return 0;
}

/* ---- top ---------------------------------------------------------------------------------- */

enum { WINDOW = 100, PER_SECOND = 10 }; /* the last 10 s of samples */

struct fn {
    char *name;
    unsigned self, total, mark;
};
static struct fn *fns;
static size_t nfns, capfns;

static unsigned intern(const char *name) {
    for (size_t i = 0; i < nfns; i++) /* a profile's functions are few hundred at most */
        if (!strcmp(fns[i].name, name))
            return (unsigned)i;
    if (nfns == capfns) {
        capfns = capfns ? 2 * capfns : 256;
        fns = realloc(fns, capfns * sizeof *fns);
        if (!fns)
            die("out of memory");
    }
    fns[nfns].name = strdup(name);
    fns[nfns].self = fns[nfns].total = fns[nfns].mark = 0;
    return (unsigned)nfns++;
}

struct sample { /* one thread in one snapshot */
    int tid;
    int waiting;
    unsigned n;
    unsigned *fn; /* leaf first */
};
struct task_sample { /* one asyncio task in one snapshot */
    unsigned name;   /* "task:NAME" */
    unsigned leaf;   /* what it waits on, or UINT_MAX while it runs */
};
struct tick {
    size_t n, ntasks;
    struct sample *s;
    struct task_sample *t;
};
static struct tick ticks[WINDOW];
static unsigned tick_at, tick_count;

static struct {
    int tids[256];
    char names[256][64];
    int n;
} seen;

static void remember_thread(int tid, const char *name) {
    for (int i = 0; i < seen.n; i++)
        if (seen.tids[i] == tid)
            return;
    if (seen.n == 256)
        return;
    seen.tids[seen.n] = tid;
    snprintf(seen.names[seen.n], sizeof seen.names[0], "%s", name);
    seen.n++;
}

static char python_version[64] = "?";

static void take_sample(int pid) {
    size_t len;
    char *answer = ask(pid, 1, &len), *save;
    struct tick *t = &ticks[tick_at];
    for (size_t i = 0; i < t->n; i++)
        free(t->s[i].fn);
    free(t->s);
    free(t->t);
    t->n = t->ntasks = 0;
    t->s = NULL;
    t->t = NULL;
    size_t cap = 0, tcap = 0;
    struct task_sample *task = NULL;
    char *ln = strtok_r(answer, "\n", &save);
    const char *p = strstr(ln, "python=");
    if (p)
        sscanf(p, "python=%63s", python_version);
    struct sample *cur = NULL;
    unsigned fcap = 0;
    while ((ln = strtok_r(NULL, "\n", &save))) {
        if (!strncmp(ln, "thread ", 7)) {
            if (t->n == cap) {
                cap = cap ? 2 * cap : 16;
                t->s = realloc(t->s, cap * sizeof *t->s);
                if (!t->s)
                    die("out of memory");
            }
            cur = &t->s[t->n++];
            int off = 0;
            cur->tid = 0;
            sscanf(ln + 7, "%d %n", &cur->tid, &off);
            remember_thread(cur->tid, ln + 7 + off);
            cur->waiting = 0;
            cur->n = 0;
            cur->fn = NULL;
            fcap = 0;
            task = NULL;
        } else if (!strncmp(ln, "task ", 5)) {
            if (t->ntasks == tcap) {
                tcap = tcap ? 2 * tcap : 16;
                t->t = realloc(t->t, tcap * sizeof *t->t);
                if (!t->t)
                    die("out of memory");
            }
            task = &t->t[t->ntasks++];
            cur = NULL;
            int off = 0, tid;
            char key[200];
            sscanf(ln + 5, "%d %n", &tid, &off);
            snprintf(key, sizeof key, "task:%s", ln + 5 + off);
            task->name = intern(key);
            task->leaf = UINT_MAX;
        } else if (task && !strncmp(ln, "frame 0\t<", 9)) {
            char *q = ln + 8, *end = strchr(q, '\t');
            if (end)
                *end = 0;
            task->leaf = intern(q); /* the last synthetic frame: the leaf */
        } else if (cur && !strncmp(ln, "state ", 6)) {
            cur->waiting = strcmp(ln + 6, "running") != 0;
        } else if (cur && !strncmp(ln, "frame ", 6)) {
            char *q = strchr(ln + 6, '\t'), *file = q ? strchr(q + 1, '\t') : NULL;
            if (!q || !file)
                continue;
            *file++ = 0;
            char key[1200];
            const char *base = strrchr(file, '/');
            if (file[0])
                snprintf(key, sizeof key, "%s (%s)", q + 1, base ? base + 1 : file);
            else
                snprintf(key, sizeof key, "%s", q + 1);
            if (cur->n < 1024) { /* the agent sends at most 512 */
                if (cur->n == fcap) {
                    fcap = fcap ? 2 * fcap : 32;
                    cur->fn = realloc(cur->fn, fcap * sizeof *cur->fn);
                    if (!cur->fn)
                        die("out of memory");
                }
                cur->fn[cur->n++] = intern(key); /* root first for now */
            }
        }
    }
    for (size_t i = 0; i < t->n; i++) /* leaf first */
        for (unsigned a = 0, b = t->s[i].n; b > 0 && a < --b; a++) {
            unsigned x = t->s[i].fn[a];
            t->s[i].fn[a] = t->s[i].fn[b];
            t->s[i].fn[b] = x;
        }
    free(answer);
    tick_at = (tick_at + 1) % WINDOW;
    if (tick_count < WINDOW)
        tick_count++;
}

static int sort_total, show_waiting, thread_pick = -1; /* -1: all threads */

static int by_share(const void *a, const void *b) {
    const struct fn *x = *(const struct fn *const *)a, *y = *(const struct fn *const *)b;
    unsigned kx = sort_total ? x->total : x->self, ky = sort_total ? y->total : y->self;
    if (kx != ky)
        return kx < ky ? 1 : -1;
    unsigned ox = sort_total ? x->self : x->total, oy = sort_total ? y->self : y->total;
    return ox < oy ? 1 : ox > oy ? -1 : strcmp(x->name, y->name);
}

static void draw(int pid) {
    for (size_t i = 0; i < nfns; i++)
        fns[i].self = fns[i].total = fns[i].mark = 0;
    unsigned samples = 0, stamp = 0;
    int want = thread_pick >= 0 && thread_pick < seen.n ? seen.tids[thread_pick] : 0;
    for (unsigned k = 0; k < tick_count; k++)
        for (size_t i = 0; i < ticks[k].n; i++) {
            struct sample *s = &ticks[k].s[i];
            if ((want && s->tid != want) || (s->waiting && !show_waiting) || s->n == 0)
                continue;
            samples++;
            stamp++;
            fns[s->fn[0]].self++;
            for (unsigned j = 0; j < s->n; j++)
                if (fns[s->fn[j]].mark != stamp) { /* recursion counts once */
                    fns[s->fn[j]].mark = stamp;
                    fns[s->fn[j]].total++;
                }
        }
    struct winsize ws = {0};
    int rows = ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 6 ? ws.ws_row : 24;
    int cols = ws.ws_col > 20 ? ws.ws_col : 80;
    struct fn **order = malloc((nfns ? nfns : 1) * sizeof *order);
    if (!order)
        die("out of memory");
    size_t m = 0;
    for (size_t i = 0; i < nfns; i++)
        if (fns[i].total)
            order[m++] = &fns[i];
    qsort(order, m, sizeof *order, by_share);
    /* asyncio tasks: per task, the snapshots it ran or waited in, and its commonest wait. */
    struct task_row {
        unsigned name, ran, waited, leaf, leaf_n;
    } *trows = calloc(nfns ? nfns : 1, sizeof *trows);
    unsigned *leaf_count = calloc(nfns ? nfns : 1, sizeof *leaf_count);
    if (!trows || !leaf_count)
        die("out of memory");
    size_t nt = 0, task_snapshots = 0;
    for (unsigned k = 0; k < tick_count; k++)
        task_snapshots += ticks[k].ntasks > 0;
    for (size_t i = 0; i < nfns; i++)
        fns[i].mark = 0;
    for (unsigned k = 0; k < tick_count; k++)
        for (size_t i = 0; i < ticks[k].ntasks; i++) {
            struct task_sample *ts = &ticks[k].t[i];
            if (!fns[ts->name].mark) {
                trows[nt].name = ts->name;
                fns[ts->name].mark = (unsigned)++nt;
            }
            struct task_row *r = &trows[fns[ts->name].mark - 1];
            if (ts->leaf == UINT_MAX)
                r->ran++;
            else
                r->waited++;
        }
    for (size_t j = 0; j < nt; j++) { /* each task's commonest wait */
        memset(leaf_count, 0, nfns * sizeof *leaf_count);
        for (unsigned k = 0; k < tick_count; k++)
            for (size_t i = 0; i < ticks[k].ntasks; i++) {
                struct task_sample *ts = &ticks[k].t[i];
                if (ts->name == trows[j].name && ts->leaf != UINT_MAX &&
                    ++leaf_count[ts->leaf] > trows[j].leaf_n) {
                    trows[j].leaf = ts->leaf;
                    trows[j].leaf_n = leaf_count[ts->leaf];
                }
            }
    }
    int task_rows = nt ? (int)(nt < 8 ? nt : 8) + 2 : 0;
    printf("\x1b[H\x1b[2J");
    printf("pyagent top: process %d, Python %s; thread %s; %s threads %s; sorted by %s\r\n", pid,
           python_version, want ? seen.names[thread_pick] : "all",
           show_waiting ? "waiting" : "running", show_waiting ? "counted" : "only",
           sort_total ? "total" : "self");
    printf("%u samples in the last %u s. Keys: s self, t total, n next thread, a all, i waiting, "
           "q quit\r\n\r\n",
           samples, (tick_count + PER_SECOND - 1) / PER_SECOND);
    printf("%7s %7s  %s\r\n", "SELF%", "TOTAL%", "FUNCTION");
    for (size_t i = 0; i < m && (int)i < rows - 5 - task_rows; i++)
        printf("%7.1f %7.1f  %.*s\r\n", samples ? 100.0 * order[i]->self / samples : 0.0,
               samples ? 100.0 * order[i]->total / samples : 0.0, cols > 18 ? cols - 18 : 1,
               order[i]->name);
    if (nt) {
        printf("\r\n%7s %7s  %-32s %s\r\n", "RUN%", "WAIT%", "TASK", "WAITING MOSTLY ON");
        for (size_t j = 0; j < nt && j < 8; j++) {
            double d = task_snapshots ? 100.0 / (double)task_snapshots : 0.0;
            printf("%7.1f %7.1f  %-32.32s %s\r\n", trows[j].ran * d, trows[j].waited * d,
                   fns[trows[j].name].name, trows[j].leaf_n ? fns[trows[j].leaf].name : "-");
        }
    }
    fflush(stdout);
    free(order);
    free(trows);
    free(leaf_count);
}

static struct termios saved_tty;
static int tty_raw;
static volatile sig_atomic_t quit_signal;

static void restore_tty(void) {
    if (tty_raw) {
        tcsetattr(0, TCSANOW, &saved_tty);
        tty_raw = 0;
    }
    printf("\x1b[?25h\x1b[?1049l");
    fflush(stdout);
}

static void on_quit(int sig) {
    quit_signal = sig;
}

static int top(int pid) {
    size_t len;
    free(ask(pid, 1, &len)); /* a clear refusal before the screen is taken */
    if (isatty(0) && tcgetattr(0, &saved_tty) == 0) {
        struct termios raw = saved_tty;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tty_raw = tcsetattr(0, TCSANOW, &raw) == 0;
    }
    atexit(restore_tty);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_quit;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    printf("\x1b[?1049h\x1b[?25l");
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (unsigned n = 0; !quit_signal; n++) {
        take_sample(pid);
        if (n % PER_SECOND == 0)
            draw(pid);
        next.tv_nsec += 1000000000L / PER_SECOND;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        /* Keys until the next sample is due. */
        for (;;) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            long ms = (next.tv_sec - now.tv_sec) * 1000 + (next.tv_nsec - now.tv_nsec) / 1000000;
            if (ms <= 0 || quit_signal)
                break;
            struct pollfd p = {0, POLLIN, 0};
            if (poll(&p, 1, (int)ms) <= 0)
                continue;
            char c;
            if (read(0, &c, 1) != 1) {
                usleep((useconds_t)ms * 1000); /* stdin at its end: only a signal quits */
                continue;
            }
            if (c == 'q' || c == 'Q')
                return 0;
            if (c == 's')
                sort_total = 0;
            else if (c == 't')
                sort_total = 1;
            else if (c == 'i')
                show_waiting = !show_waiting;
            else if (c == 'a')
                thread_pick = -1;
            else if (c == 'n')
                thread_pick = seen.n ? (thread_pick + 1) % seen.n : -1;
            else
                continue;
            draw(pid);
        }
    }
    return 0;
}

/* ---- main --------------------------------------------------------------------------------- */

static int parse_pid(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v <= 0 || v > 0x3fffffff) {
        fprintf(stderr, "pyagent: '%s' is not a process id; see pyagent --help\n", s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_text, stdout);
        return 0;
    }
    int tasks = argc == 4 && !strcmp(argv[1], "dump") && !strcmp(argv[2], "--async");
    if (argc != 3 + tasks || (strcmp(argv[1], "dump") != 0 && strcmp(argv[1], "top") != 0)) {
        fprintf(stderr, "pyagent: usage: pyagent dump [--async] PID | pyagent top PID; see "
                        "pyagent --help\n");
        return 2;
    }
    target = parse_pid(argv[2 + tasks]);
    enter_netns(target);
    return !strcmp(argv[1], "dump") ? dump(target, tasks) : top(target);
}
