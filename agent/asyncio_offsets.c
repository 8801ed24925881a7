/* asyncio_offsets.c: finds the layout CPython 3.14+ publishes for its own tools about
 * asyncio (_Py_AsyncioModuleDebugOffsets: the task object's fields and the thread state's
 * running task), so that the walk can name the running task (agent/tasks.h); before 3.14,
 * the agent's own knowledge of the task object.
 *
 * Normal context only. The block sits in an ELF section of its own, .AsyncioDebug, of the
 * object that holds the _asyncio module: the executable or libpython when the module is
 * built in (Debian), else _asyncio.cpython-3NN-*.so, loaded by dlopen at the first
 * `import asyncio`. No symbol names it, so the object's section headers are read from its
 * file (as CPython's own remote debugging does) and the block from memory at the section's
 * address plus the object's load bias. Asked at start (built in) and after each dlopen of a
 * file whose name says _asyncio; once found, never again. */
#include "asyncio_offsets.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../base/log.h"
#include "tasks.h"

/* The block's shape in 3.14 and 3.15: 13 words. */
enum {
    W_TASK_SIZE = 0,
    W_TASK_NAME = 1,
    W_TASK_CORO = 5,
    W_TASK_NODE = 6,
    W_TS_SIZE = 9,
    W_TS_RUNNING_TASK = 11,
    W_TS_TASKS_HEAD = 12,
    WORDS = 13
};

static int read_at(int fd, void *buf, size_t n, off_t off) {
    return pread(fd, buf, n, off) == (ssize_t)n ? 0 : -1;
}

/* The address and size of section .AsyncioDebug of the object in file path, relative to its
 * load address; 0 when it has none (or the file cannot be read). */
static int find_section(const char *path, uint64_t *addr, uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int found = 0;
    Elf64_Ehdr eh;
    Elf64_Shdr strtab;
    if (read_at(fd, &eh, sizeof eh, 0) != 0 || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shnum == 0 || eh.e_shnum > 4096 || eh.e_shstrndx >= eh.e_shnum ||
        read_at(fd, &strtab, sizeof strtab,
                (off_t)(eh.e_shoff + (uint64_t)eh.e_shstrndx * sizeof(Elf64_Shdr))) != 0)
        goto out;
    static const char want[] = ".AsyncioDebug";
    for (unsigned i = 0; i < eh.e_shnum && !found; i++) {
        Elf64_Shdr sh;
        char name[sizeof want];
        if (read_at(fd, &sh, sizeof sh, (off_t)(eh.e_shoff + (uint64_t)i * sizeof sh)) != 0)
            break;
        if (sh.sh_name >= strtab.sh_size ||
            read_at(fd, name, sizeof name, (off_t)(strtab.sh_offset + sh.sh_name)) != 0)
            continue;
        if (memcmp(name, want, sizeof want) == 0 && sh.sh_addr != 0 && sh.sh_type == SHT_PROGBITS) {
            *addr = sh.sh_addr;
            *size = sh.sh_size;
            found = 1;
        }
    }
out:
    close(fd);
    return found;
}

/* Takes the published block w (size bytes) if its values make sense. */
static int take_block(const struct pa_python *py, const uint64_t *w, uint64_t size) {
    if (size < WORDS * sizeof(uint64_t)) {
        pa_log(PA_LOG_WARN,
               "Python %s: asyncio's published layout is %llu bytes, not %u; no task "
               "frames",
               py->version, (unsigned long long)size, (unsigned)(WORDS * sizeof(uint64_t)));
        return -1;
    }
    uint64_t task_size = w[W_TASK_SIZE], ts_size = w[W_TS_SIZE];
    if (task_size < 32 || task_size > 4096 || w[W_TASK_NAME] + 8 > task_size ||
        w[W_TASK_CORO] + 8 > task_size || ts_size < 64 || ts_size > (1u << 20) ||
        w[W_TS_RUNNING_TASK] + 8 > ts_size || (w[W_TASK_NAME] | w[W_TASK_CORO]) % 8 ||
        w[W_TS_RUNNING_TASK] % 8 || w[W_TASK_NODE] + 16 > task_size || w[W_TASK_NODE] % 8 ||
        w[W_TS_TASKS_HEAD] + 16 > ts_size || w[W_TS_TASKS_HEAD] % 8) {
        pa_log(PA_LOG_WARN,
               "Python %s: asyncio's published layout does not make sense; no task "
               "frames",
               py->version);
        return -1;
    }
    struct pa_asyncio_offsets o = {(unsigned)w[W_TS_RUNNING_TASK], (unsigned)w[W_TASK_NAME],
                                   (unsigned)w[W_TASK_CORO], (unsigned)w[W_TASK_NODE],
                                   (unsigned)w[W_TS_TASKS_HEAD]};
    pa_tasks_set_offsets(&o);
    pa_log(PA_LOG_DEBUG,
           "asyncio: running task at +%u of the thread state, name +%u, coroutine "
           "+%u of the task",
           o.ts_running_task, o.task_name, o.task_coro);
    return 0;
}

struct search {
    const struct pa_python *py;
    const char *only; /* an object's file name, or NULL: the executable and libpython */
    int done;
};

static int visit(struct dl_phdr_info *info, size_t len, void *arg) {
    (void)len;
    struct search *s = arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int main_object = name[0] == 0;
    int wanted = s->only ? strcmp(name, s->only) == 0 || strstr(name, "/_asyncio.") != NULL
                         : main_object || strstr(name, "libpython") != NULL;
    if (!wanted)
        return 0;
    uint64_t addr, size;
    if (!find_section(main_object ? "/proc/self/exe" : name, &addr, &size))
        return 0;
    take_block(s->py, (const uint64_t *)(info->dlpi_addr + addr), size);
    s->done = 1;
    return 1;
}

/* Before 3.14 nothing is published: TaskObj is private to Modules/_asynciomodule.c, so its
 * task_coro and task_name come from the agent's own knowledge, measured on each version
 * (the words of a task object compared with the addresses of its coroutine and its name)
 * and checked by test_agent.py's asyncio_tasks on every interpreter, Debian's and the debug
 * builds included. 3.13 dropped fields from FutureObj, hence its smaller offsets; a
 * free-threaded build's longer object header moves both. */
static const struct {
    unsigned minor, task_coro, task_name;
} private_layouts[] = {{11, 136, 144}, {12, 136, 144}, {13, 120, 128}};

void pa_asyncio_find(const struct pa_python *py, const char *loaded) {
    if (pa_tasks_known())
        return;
    for (size_t i = 0; i < sizeof private_layouts / sizeof private_layouts[0]; i++)
        if (private_layouts[i].minor == py->minor) {
            /* A free-threaded build's object header is 16 bytes longer (ob_type at 24). */
            unsigned shift = py->layout.ob_type - 8;
            struct pa_asyncio_offsets o = {0, private_layouts[i].task_name + shift,
                                           private_layouts[i].task_coro + shift, 0, 0};
            pa_tasks_set_offsets(&o);
            return;
        }
    if (py->minor < 14 || py->minor > 15)
        return;
    if (loaded && !strstr(loaded, "_asyncio"))
        return;
    /* dl_iterate_phdr names an object by the path it was loaded from: the one dlopen was
     * given when that had a slash (CPython's importer gives full paths). */
    struct search s = {py, loaded, 0};
    dl_iterate_phdr(visit, &s);
}
