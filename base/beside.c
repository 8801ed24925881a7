/* beside.c: see beside.h. */
#include "beside.h"

#include <dlfcn.h>
#include <string.h>

int pa_path_beside(const void *addr, const char *file, char *out, size_t cap) {
    Dl_info self;
    if (cap == 0 || !dladdr(addr, &self) || !self.dli_fname)
        return -1;
    const char *slash = strrchr(self.dli_fname, '/');
    size_t dir = slash ? (size_t)(slash - self.dli_fname + 1) : 0, len = strlen(file);
    if (dir + len + 1 > cap) {
        size_t n = strlen(self.dli_fname);
        n = n < cap - 1 ? n : cap - 1;
        memcpy(out, self.dli_fname, n);
        out[n] = 0;
        return -2;
    }
    memcpy(out, self.dli_fname, dir);
    memcpy(out + dir, file, len + 1);
    return 0;
}
