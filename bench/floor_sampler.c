/* floor_sampler.c: the least an in-process CPU sampler can do, for bench/startup.py's floor
 * rows. Preloaded, it arms a perf task-clock event on the main thread at PYAGENT_RATE (100 Hz,
 * pyagent's default, when unset) whose overflow sends SIGPROF to that thread, as pyagent's CPU
 * mode does; its handler only counts; at exit it writes the count to FLOOR_OUT.PID.tmp and
 * renames that to FLOOR_OUT.PID, as pyagent writes its profile (one file per process). No frame is
 * read, nothing is symbolized, no table exists: what pyagent costs beyond this library is its own
 * work, and this library's cost is what loading, a timer, signals and a file cost on the machine.
 *
 * Two steps closer to what a Python profiler must do, each switched on by the environment:
 *
 * - FLOOR_LOAD=PATH (in the library that is preloaded): loaded as a stub, the library only
 *   loads PATH (this same library, built again) with dlopen when the process is CPython, as
 *   libpyagent.so loads its agent so that other processes pay only for a small library; the
 *   copy loaded does the sampling. What the second load costs is the floor of that design.
 * - FLOOR_WALK=1, CPython 3.11 only (the offsets below are 3.11's, from
 *   agent/pylayouts.inc): the handler also walks the main thread's Python frames and copies,
 *   for each code object not seen before, its qualified name and file name into a table, and
 *   counts the stack by its code objects; the file written at exit names each stack's frames.
 *   That is the least reading and naming of the interpreter's memory a sampler of Python
 *   stacks does, with no fault guard (a floor, not a profiler: the interpreter is read only
 *   while it is initialized and not finalizing).
 *
 *   cc -shared -fPIC -O2 -o floor_sampler.so bench/floor_sampler.c
 *   LD_PRELOAD=./floor_sampler.so FLOOR_OUT=/tmp/n python3 -c pass      # writes /tmp/n.PID
 *   cp floor_sampler.so floor_core.so
 *   LD_PRELOAD=./floor_sampler.so FLOOR_LOAD=$PWD/floor_core.so FLOOR_WALK=1 FLOOR_OUT=/tmp/n \
 *       python3.11 -c pass */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile sig_atomic_t samples;
static int event = -1;

/* ---- the walk (FLOOR_WALK, 3.11) ------------------------------------------------------- */

enum { MAX_DEPTH = 128, NAME_MAX_CHARS = 64, CODES = 4096, STACKS = 1024, FRAMES = 16384 };
/* 3.11's offsets (agent/pylayouts.inc). */
enum {
    RT_FINALIZING = 24,
    RT_INTERPRETERS_HEAD = 40,
    IS_THREADS_HEAD = 16,
    TS_CFRAME = 56,
    CFRAME_CURRENT = 8,
    FR_CODE = 32,
    FR_BACK = 48,
    FR_OWNER = 69,
    CO_FILENAME = 112,
    CO_QUALNAME = 128,
    U_LENGTH = 16,
    U_STATE = 32,
    U_ASCII_DATA = 48,
    OWNED_BY_CSTACK = 3,
};

struct code {
    uintptr_t code;
    char qualname[NAME_MAX_CHARS + 1], filename[NAME_MAX_CHARS + 1];
};
struct stack {
    uint64_t hash;
    uint32_t first, depth, count;
};

static uintptr_t runtime, code_type;
static struct code codes[CODES];
static struct stack stacks[STACKS];
static uint32_t frames[FRAMES], frames_used, n_stacks, lost;

#define RD(type, addr) (*(const volatile type *)(uintptr_t)(addr))

/* Copies the ASCII str at s (up to NAME_MAX_CHARS) into out; "?" when it is not one. */
static void copy_ascii(uintptr_t s, char *out) {
    uint32_t state = RD(uint32_t, s + U_STATE);
    long len = RD(long, s + U_LENGTH);
    if (!s || !((state >> 6) & 1) || len < 0) {
        strcpy(out, "?");
        return;
    }
    unsigned n = len > NAME_MAX_CHARS ? NAME_MAX_CHARS : (unsigned)len;
    for (unsigned i = 0; i < n; i++)
        out[i] = RD(char, s + U_ASCII_DATA + i);
    out[n] = 0;
}

/* The index of code in codes, named at its first sight; CODES when the table is full. */
static uint32_t code_index(uintptr_t code) {
    uint32_t h = (uint32_t)((code >> 4) * 0x9e3779b1u) % CODES;
    for (uint32_t k = 0; k < 64; k++) {
        struct code *c = &codes[(h + k) % CODES];
        if (c->code == code)
            return (h + k) % CODES;
        if (!c->code) {
            c->code = code;
            copy_ascii(RD(uintptr_t, code + CO_QUALNAME), c->qualname);
            copy_ascii(RD(uintptr_t, code + CO_FILENAME), c->filename);
            return (h + k) % CODES;
        }
    }
    return CODES;
}

static void walk(void) {
    if (!runtime || RD(uintptr_t, runtime + RT_FINALIZING))
        return;
    uintptr_t interp = RD(uintptr_t, runtime + RT_INTERPRETERS_HEAD);
    uintptr_t ts = interp ? RD(uintptr_t, interp + IS_THREADS_HEAD) : 0;
    uintptr_t cframe = ts ? RD(uintptr_t, ts + TS_CFRAME) : 0;
    uintptr_t f = cframe ? RD(uintptr_t, cframe + CFRAME_CURRENT) : 0;
    uint32_t got[MAX_DEPTH], depth = 0;
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (; f && depth < MAX_DEPTH; f = RD(uintptr_t, f + FR_BACK)) {
        if (RD(uint8_t, f + FR_OWNER) == OWNED_BY_CSTACK)
            continue;
        uintptr_t code = RD(uintptr_t, f + FR_CODE);
        if (!code || RD(uintptr_t, code + 8) != code_type)
            break;
        uint32_t i = code_index(code);
        if (i == CODES)
            break;
        got[depth++] = i;
        hash = (hash ^ i) * 0x100000001b3ULL;
    }
    if (!depth)
        return;
    uint32_t h = (uint32_t)(hash % STACKS);
    for (uint32_t k = 0; k < STACKS; k++) {
        struct stack *s = &stacks[(h + k) % STACKS];
        if (s->count && s->hash == hash && s->depth == depth &&
            memcmp(&frames[s->first], got, depth * sizeof *got) == 0) {
            s->count++;
            return;
        }
        if (!s->count) {
            if (frames_used + depth > FRAMES)
                break;
            memcpy(&frames[frames_used], got, depth * sizeof *got);
            *s = (struct stack){hash, frames_used, depth, 1};
            frames_used += depth;
            n_stacks++;
            return;
        }
    }
    lost++;
}

static void on_prof(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    samples++;
    walk();
}

/* ---- start and exit ---------------------------------------------------------------------- */

static int loaded_as_stub;

__attribute__((constructor)) static void floor_start(void) {
    const char *load = getenv("FLOOR_LOAD");
    if (load && *load) {
        /* The stub: nothing but the second load, and only in CPython. This copy is the stub
         * when FLOOR_LOAD names another file than the one this copy was loaded from. */
        Dl_info self;
        if (dladdr((void *)&floor_start, &self) && self.dli_fname &&
            strcmp(self.dli_fname, load) != 0) {
            loaded_as_stub = 1;
            if (dlsym(RTLD_DEFAULT, "Py_GetVersion") &&
                !dlopen(load, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE))
                fprintf(stderr, "floor_sampler: %s\n", dlerror());
            return;
        }
    }
    const char *w = getenv("FLOOR_WALK");
    if (w && *w == '1') {
        const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
        if (version && strncmp(version(), "3.11.", 5) == 0) {
            runtime = (uintptr_t)dlsym(RTLD_DEFAULT, "_PyRuntime");
            code_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyCode_Type");
        } else {
            fprintf(stderr, "floor_sampler: FLOOR_WALK knows CPython 3.11 only\n");
        }
    }
    const char *r = getenv("PYAGENT_RATE");
    long rate = r ? atol(r) : 100;
    if (rate <= 0)
        rate = 100;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = (unsigned long long)(1000000000L / rate);
    attr.wakeup_events = 1;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    event = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (event < 0)
        return;
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (fcntl(event, F_SETOWN_EX, &owner) != 0 || fcntl(event, F_SETSIG, SIGPROF) != 0 ||
        fcntl(event, F_SETFL, O_ASYNC | O_NONBLOCK) != 0 ||
        ioctl(event, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        close(event);
        event = -1;
    }
}

__attribute__((destructor)) static void floor_stop(void) {
    const char *out = getenv("FLOOR_OUT");
    if (event >= 0)
        ioctl(event, PERF_EVENT_IOC_DISABLE, 0);
    if (!out || loaded_as_stub)
        return;
    runtime = 0; /* no walk from here on (a signal already pending) */
    char path[4096], tmp[4200];
    if (snprintf(path, sizeof path, "%s.%d", out, (int)getpid()) >= (int)sizeof path)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "samples %d stacks %u lost %u\n", (int)samples, n_stacks, lost);
    for (uint32_t i = 0; i < STACKS; i++) {
        const struct stack *s = &stacks[i];
        if (!s->count)
            continue;
        for (uint32_t d = s->depth; d-- > 0;) {
            const struct code *c = &codes[frames[s->first + d]];
            fprintf(f, "%s (%s)%s", c->qualname, c->filename, d ? ";" : "");
        }
        fprintf(f, " %u\n", s->count);
    }
    if (fclose(f) == 0)
        rename(tmp, path);
}
