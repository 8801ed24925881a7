/* formats.c - the registry of the data formats a profile is written in: one table of name,
 * file extension, MIME type and encoder, read by every program that writes profiles (the
 * renderer's export and reports, the collector's /render, the uploader), so that a format is
 * added, named and served in one place. */
#include "profile_int.h"

#include <string.h>

static int enc_folded(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)o, (void)err;
    pa_profile_encode_folded(p, out);
    return 0;
}

static int enc_pprof(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)o;
    return pa_pprof_encode(p, 1, out, err);
}

static const char *title_of(const pa_output_opts *o) {
    return o && o->title ? o->title : "profile";
}

static int enc_speedscope(const pa_profile *p, const pa_output_opts *o, pa_buf *out,
                          pa_error *err) {
    (void)err;
    pa_profile_encode_speedscope(p, title_of(o), out);
    return 0;
}

static int enc_firefox(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)err;
    pa_profile_encode_firefox(p, title_of(o), out);
    return 0;
}

static int enc_json(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)err;
    pa_profile_encode_report_json(p, NULL, title_of(o), out);
    return 0;
}

static int enc_pstats(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)o;
    return pa_profile_encode_pstats(p, out, err);
}

static int enc_jsonl(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)o;
    return pa_profile_encode_jsonl(p, out, err);
}

static int enc_capture(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err) {
    (void)o;
    return pa_capture_encode(p, out, err);
}

static const pa_output_format folded = {"folded", ".folded", "text/plain; charset=utf-8", NULL,
                                        enc_folded};
static const pa_output_format pprof = {"pprof", ".pb.gz", "application/octet-stream",
                                       "attachment; filename=\"profile.pb.gz\"", enc_pprof};
static const pa_output_format speedscope = {"speedscope", ".speedscope.json", "application/json",
                                            "attachment; filename=\"profile.speedscope.json\"",
                                            enc_speedscope};
static const pa_output_format firefox = {"firefox", ".firefox.json", "application/json",
                                         "attachment; filename=\"profile.firefox.json\"",
                                         enc_firefox};
static const pa_output_format json = {"json", ".report.json", "application/json", NULL, enc_json};
static const pa_output_format pstats = {"pstats", ".pstats", "application/octet-stream",
                                        "attachment; filename=\"profile.pstats\"", enc_pstats};
static const pa_output_format jsonl = {"jsonl", ".jsonl", "application/jsonl",
                                       "attachment; filename=\"profile.jsonl\"", enc_jsonl};

static const pa_output_format capture = {"capture", ".pyacap", "application/octet-stream",
                                         "attachment; filename=\"profile.pyacap\"", enc_capture};

const pa_output_format *const pa_output_formats[] = {&folded, &pprof, &speedscope, &firefox, &json,
                                                     &pstats, &jsonl, &capture,    NULL};

const pa_output_format *pa_output_format_find(const char *name) {
    for (size_t i = 0; pa_output_formats[i]; i++)
        if (strcmp(pa_output_formats[i]->name, name) == 0)
            return pa_output_formats[i];
    return NULL;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

const pa_output_format *pa_output_format_for_path(const char *path) {
    /* Other spellings of the same formats, then the registry's own extensions (longest
     * first: ".speedscope.json" before ".json"). */
    static const struct {
        const char *ext;
        const pa_output_format *f;
    } aliases[] = {{".pprof", &pprof},
                   {".pb", &pprof},
                   {".txt", &folded},
                   {".collapsed", &folded},
                   {".report.json", &json},
                   {".firefox.json", &firefox},
                   {".prof", &pstats},
                   /* before the registry, any ".json" export was speedscope's */
                   {".json", &speedscope}};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (ends_with(path, aliases[i].ext))
            return aliases[i].f;
    const pa_output_format *best = NULL;
    for (size_t i = 0; pa_output_formats[i]; i++)
        if (ends_with(path, pa_output_formats[i]->extension) &&
            (!best || strlen(pa_output_formats[i]->extension) > strlen(best->extension)))
            best = pa_output_formats[i];
    return best;
}
