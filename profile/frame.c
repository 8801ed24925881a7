/* frame.c - what a frame string says: its kind, name, file and line.
 *
 * The folded dialect packs everything into one string per frame (see DESIGN.md), so reports
 * that need a file (heatmap) or a colour by origin (flamegraph) split it here, in one place.
 * Splitting is from the right, because qualnames may contain spaces and parentheses
 * ("<lambda>", "f.<locals>.g") but a trailing "(file:line)" or "[library]" is unambiguous. */
#include "profile_int.h"

#include <string.h>

static int has(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    if (n > len)
        return 0;
    for (size_t i = 0; i + n <= len; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, n) == 0)
            return 1;
    return 0;
}

pa_frame_kind pa_file_kind(const char *file, size_t len) {
    if (has(file, len, "site-packages") || has(file, len, "dist-packages"))
        return PA_FRAME_SITE;
    if (has(file, len, "/lib/python") || has(file, len, "\\Lib\\") ||
        (len > 7 && memcmp(file, "<frozen", 7) == 0))
        return PA_FRAME_STDLIB;
    return PA_FRAME_OWN;
}

void pa_frame_parse(const char *s, size_t len, pa_frame_info *out) {
    memset(out, 0, sizeof *out);
    out->kind = PA_FRAME_OTHER;
    out->name = s;
    out->name_len = len;
    if (len == 0)
        return;
    if (len >= 7 && memcmp(s, "thread:", 7) == 0) {
        out->kind = PA_FRAME_THREAD;
        out->name = s + 7;
        out->name_len = len - 7;
        return;
    }
    if (s[len - 1] == ')') {
        /* "qualname (file:line)" or "qualname (file)" */
        size_t i = len - 1;
        while (i > 1 && !(s[i - 1] == ' ' && s[i] == '('))
            i--;
        if (i > 1) {
            const char *file = s + i + 1;
            size_t flen = len - 1 - (i + 1);
            size_t colon = flen;
            while (colon > 0 && file[colon - 1] >= '0' && file[colon - 1] <= '9')
                colon--;
            uint32_t line = 0;
            if (colon > 0 && colon < flen && file[colon - 1] == ':') {
                for (size_t k = colon; k < flen && line < 100000000; k++)
                    line = line * 10 + (uint32_t)(file[k] - '0');
                flen = colon - 1;
            }
            if (flen > 0) {
                out->name_len = i - 1;
                out->file = file;
                out->file_len = flen;
                out->line = line;
                out->kind = pa_file_kind(file, flen);
                return;
            }
        }
    }
    if (s[len - 1] == ']') {
        size_t i = len - 1;
        while (i > 1 && !(s[i - 1] == ' ' && s[i] == '['))
            i--;
        if (i > 1) {
            out->kind = PA_FRAME_NATIVE;
            out->name_len = i - 1;
            out->file = s + i + 1;
            out->file_len = len - 1 - (i + 1);
            return;
        }
    }
    if (s[0] == '<' && s[len - 1] == '>')
        out->kind = PA_FRAME_SYNTHETIC;
}

const char *pa_frame_kind_name(pa_frame_kind k) {
    static const char *const names[] = {"own",       "stdlib", "site", "native",
                                        "synthetic", "thread", "other"};
    return (unsigned)k <= PA_FRAME_OTHER ? names[k] : "other";
}
