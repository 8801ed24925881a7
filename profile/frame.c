/* frame.c - what a frame string says: its kind, name, file and line.
 *
 * The folded dialect packs everything into one string per frame (see DESIGN.md), so reports
 * that need a file (heatmap) or a colour by origin (flamegraph) split it here, in one place.
 * Splitting is from the right, because qualnames may contain spaces and parentheses
 * ("<lambda>", "f.<locals>.g") but a trailing "(file:line)" or "[library]" is unambiguous. */
#include "profile_int.h"

#include <string.h>

/* memchr to each candidate first byte, then memcmp: file names are short, and glibc's memmem
 * (two-way, with its set-up per call) cost five times the old byte loop on them. */
static int has(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = s, *end = s + len; (size_t)(end - p) >= n; p++) {
        if ((p = memchr(p, needle[0], (size_t)(end - p) - n + 1)) == NULL)
            return 0;
        if (memcmp(p, needle, n) == 0)
            return 1;
    }
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

static int digit(char c) {
    return c >= '0' && c <= '9';
}

/* Reads digits at s[*i..len) into *v (at most 9 of them); 0 if there are none. */
static int number(const char *s, size_t len, size_t *i, int64_t *v) {
    size_t start = *i;
    *v = 0;
    while (*i < len && digit(s[*i]) && *i - start < 9)
        *v = *v * 10 + (s[(*i)++] - '0');
    return *i > start && (*i == len || !digit(s[*i]));
}

/* " @OFFSET[:COL-ENDCOL][ OPNAME]" at the end of a Python frame: fills the instruction fields
 * and returns the length of the frame without it, or len when there is no such suffix. */
static size_t instruction_suffix(const char *s, size_t len, pa_frame_info *out) {
    /* The last " @": memrchr finds each '@' from the right (this runs for every frame of
     * every upload the collector encodes, so no byte-by-byte walk over the whole frame). */
    size_t at = 1;
    for (size_t end = len; end > 1;) {
        const char *a = memrchr(s + 1, '@', end - 1);
        if (a == NULL)
            break;
        if (a[-1] == ' ') {
            at = (size_t)(a - s) + 1;
            break;
        }
        end = (size_t)(a - s);
    }
    if (at <= 2 || s[at - 3] != ')')
        return len;
    size_t i = at;
    int64_t off, col = -1, end = -1;
    if (!number(s, len, &i, &off))
        return len;
    if (i < len && s[i] == ':') {
        i++;
        if (!number(s, len, &i, &col) || i >= len || s[i] != '-')
            return len;
        i++;
        if (!number(s, len, &i, &end))
            return len;
    }
    const char *op = NULL;
    size_t op_len = 0;
    if (i < len) {
        if (s[i] != ' ' || i + 1 == len)
            return len;
        op = s + i + 1;
        op_len = len - i - 1;
        for (size_t k = 0; k < op_len; k++)
            if (!((op[k] >= 'A' && op[k] <= 'Z') || digit(op[k]) || op[k] == '_' || op[k] == '<' ||
                  op[k] == '>'))
                return len;
    }
    out->offset = off;
    out->col = (int32_t)col;
    out->end_col = (int32_t)end;
    out->op = op;
    out->op_len = op_len;
    return at - 2;
}

void pa_frame_split(const char *s, size_t len, pa_frame_info *out) {
    memset(out, 0, sizeof *out);
    out->kind = PA_FRAME_OTHER;
    out->name = s;
    out->name_len = len;
    out->base_len = len;
    out->offset = -1;
    out->col = out->end_col = -1;
    if (len == 0)
        return;
    len = out->base_len = instruction_suffix(s, len, out);
    out->name_len = len;
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
                out->kind = PA_FRAME_OWN; /* pa_frame_parse tells own, stdlib and site */
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

void pa_frame_parse(const char *s, size_t len, pa_frame_info *out) {
    pa_frame_split(s, len, out);
    if (out->kind == PA_FRAME_OWN)
        out->kind = pa_file_kind(out->file, out->file_len);
}

const char *pa_frame_kind_name(pa_frame_kind k) {
    static const char *const names[] = {"own",       "stdlib", "site", "native",
                                        "synthetic", "thread", "other"};
    return (unsigned)k <= PA_FRAME_OTHER ? names[k] : "other";
}
