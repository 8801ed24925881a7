/* main.c - pyagent-render: the command line over parender and paprofile.
 *
 * Every subcommand reads its inputs the same way (any dialect, gzip, pprof; several inputs are
 * merged; malformed lines are warned about, never fatal; unreadable or empty input is), then
 * hands one profile to one report. Exit status: 0 done, 1 bad input or output, 2 bad usage. */
#include "render.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "pyagent_version.h"

static const char *prog = "pyagent-render";

static const char usage_text[] =
    "usage: pyagent-render COMMAND [OPTIONS] PROFILE...\n"
    "\n"
    "Reports from profiles: pyagent folded, flamegraph.pl folded, py-spy raw, Austin collapsed,\n"
    "CPython profiling.sampling --collapsed, pprof, pyagent's binary capture (.pyacap); any of\n"
    "them gzip-compressed (detected).\n"
    "Several PROFILEs are merged; '-' reads standard input.\n"
    "\n"
    "commands:\n"
    "  flamegraph PROFILE... -o OUT.html|OUT.svg  interactive flamegraph (HTML canvas or SVG)\n"
    "  diff BASELINE CURRENT -o OUT.html          differential flamegraph (or --format folded)\n"
    "  heatmap PROFILE... -o DIR                  source heatmap: index.html + a page per file\n"
    "  top PROFILE...                             top functions by self and total samples\n"
    "  export PROFILE... -o OUT                   folded, pprof (gzip), speedscope, firefox, "
    "json,\n"
    "                                             pstats, jsonl, capture\n"
    "\n"
    "options (all commands):\n"
    "  -o, --output PATH      where to write ('-' = standard output; default for top)\n"
    "  --title TEXT           report title\n"
    "  --include REGEX        keep only stacks with a frame matching REGEX (POSIX ERE)\n"
    "  --exclude REGEX        drop stacks with a frame matching REGEX\n"
    "  -h, --help             this help\n"
    "  --version              the version and the commit built from\n"
    "flamegraph, HTML output: tooltips quote the hottest Python lines' source\n"
    "  --source-root OLD=NEW  as for heatmap: where the sources are read\n"
    "  --no-source            read and quote no source\n"
    "flamegraph, SVG output (flamegraph.pl's knobs):\n"
    "  --width PX (1200)  --minwidth PX (0.1)  --colors python|hot|mem|io|blue|aqua|green\n"
    "  --inverted (icicle)  --reverse (merge by leaf)  --format html|svg (default: by extension)\n"
    "diff:\n"
    "  --format html|folded   folded writes 'stack before after' lines\n"
    "heatmap:\n"
    "  --source-root OLD=NEW  read files under OLD from NEW (repeatable); with any root given,\n"
    "                         no file outside the NEW roots is read\n"
    "top:\n"
    "  -n, --limit N (20)     rows per table\n"
    "  --by function|line     aggregate by function (default) or by source line\n"
    "export:\n"
    "  --format folded|pprof|speedscope|firefox|json|pstats|jsonl|capture   default: by\n"
    "                         extension (.pb.gz/.pprof, .speedscope.json, .firefox.json,\n"
    "                         .report.json, .pstats/.prof, .jsonl, .pyacap; else folded)\n"
    "  --by-function          merge frames that differ only in line\n"
    "  --strip-instructions   drop the bytecode instructions of frames (PYAGENT_OPCODES)\n"
    "  --no-time              drop the time buckets\n"
    "  --merge-threads        drop thread:NAME roots\n"
    "  --normalize TOTAL      scale counts so they sum to about TOTAL\n";

static void usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
    exit(2);
}

struct opts {
    const char *output, *title, *include, *exclude, *format, *by;
    pa_svg_opts svg;
    const char *root_from[64], *root_to[64];
    size_t nroots;
    int no_source;
    size_t limit;
    int by_function, merge_threads, strip_instructions, no_time;
    uint64_t normalize;
};

/* Reads and merges the inputs; exits with a message when one cannot be used. */
static pa_profile *load(char **paths, int n, const struct opts *o) {
    pa_profile *p = pa_profile_new();
    for (int i = 0; i < n; i++) {
        pa_parse_stats st;
        pa_error err;
        if (pa_profile_parse_file(p, paths[i], &st, &err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            exit(1);
        }
        if (st.bad_lines)
            fprintf(stderr, "%s: warning: %s: skipped %llu malformed line%s (first at line %llu)\n",
                    prog, paths[i], (unsigned long long)st.bad_lines, st.bad_lines == 1 ? "" : "s",
                    (unsigned long long)st.first_bad_line);
    }
    if (o->include || o->exclude) {
        pa_error err;
        pa_profile *f = pa_profile_filter(p, o->include, o->exclude, &err);
        if (!f) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            exit(2);
        }
        pa_profile_free(p);
        p = f;
        if (pa_profile_total(p) == 0)
            fprintf(stderr, "%s: warning: no stack is left after --include/--exclude\n", prog);
    }
    return p;
}

static void write_out(const char *path, const pa_buf *b) {
    FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
        exit(1);
    }
    size_t n = b->len ? fwrite(b->data, 1, b->len, f) : 0;
    int bad = n != b->len || ferror(f);
    if (f != stdout)
        bad |= fclose(f) != 0;
    else
        bad |= fflush(f) != 0;
    if (bad) {
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
        exit(1);
    }
}

static const char *default_title(const char *what, char **paths, int n, char *buf, size_t size) {
    const char *base = strrchr(paths[0], '/');
    base = base ? base + 1 : paths[0];
    snprintf(buf, size, "%s: %s%s", what, base, n > 1 ? " (merged)" : "");
    return buf;
}

enum {
    OPT_TITLE = 256,
    OPT_INCLUDE,
    OPT_EXCLUDE,
    OPT_FORMAT,
    OPT_WIDTH,
    OPT_MINWIDTH,
    OPT_COLORS,
    OPT_INVERTED,
    OPT_REVERSE,
    OPT_ROOT,
    OPT_NO_SOURCE,
    OPT_BY,
    OPT_BY_FUNCTION,
    OPT_MERGE_THREADS,
    OPT_NORMALIZE,
    OPT_STRIP_INSTRUCTIONS,
    OPT_NO_TIME,
};

static const struct option long_opts[] = {
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {"limit", required_argument, NULL, 'n'},
    {"title", required_argument, NULL, OPT_TITLE},
    {"include", required_argument, NULL, OPT_INCLUDE},
    {"exclude", required_argument, NULL, OPT_EXCLUDE},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"width", required_argument, NULL, OPT_WIDTH},
    {"minwidth", required_argument, NULL, OPT_MINWIDTH},
    {"colors", required_argument, NULL, OPT_COLORS},
    {"inverted", no_argument, NULL, OPT_INVERTED},
    {"reverse", no_argument, NULL, OPT_REVERSE},
    {"source-root", required_argument, NULL, OPT_ROOT},
    {"no-source", no_argument, NULL, OPT_NO_SOURCE},
    {"by", required_argument, NULL, OPT_BY},
    {"by-function", no_argument, NULL, OPT_BY_FUNCTION},
    {"merge-threads", no_argument, NULL, OPT_MERGE_THREADS},
    {"normalize", required_argument, NULL, OPT_NORMALIZE},
    {"strip-instructions", no_argument, NULL, OPT_STRIP_INSTRUCTIONS},
    {"no-time", no_argument, NULL, OPT_NO_TIME},
    {NULL, 0, NULL, 0},
};

static long parse_num(const char *s, const char *what) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0)
        usage_error(what, s);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        fputs(PA_VERSION_LINE("pyagent-render"), stdout);
        return 0;
    }
    if (strcmp(cmd, "flamegraph") && strcmp(cmd, "diff") && strcmp(cmd, "heatmap") &&
        strcmp(cmd, "top") && strcmp(cmd, "export"))
        usage_error("unknown command '%s'", cmd);

    struct opts o;
    memset(&o, 0, sizeof o);
    o.limit = 20;
    o.svg.width = 1200;
    o.svg.minwidth = 0.1;
    optind = 2;
    int c;
    while ((c = getopt_long(argc, argv, "o:hn:", long_opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            o.output = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'n':
            o.limit = (size_t)parse_num(optarg, "bad --limit '%s' (a positive number)");
            break;
        case OPT_TITLE:
            o.title = optarg;
            break;
        case OPT_INCLUDE:
            o.include = optarg;
            break;
        case OPT_EXCLUDE:
            o.exclude = optarg;
            break;
        case OPT_FORMAT:
            o.format = optarg;
            break;
        case OPT_WIDTH:
            o.svg.width = (int)parse_num(optarg, "bad --width '%s' (pixels)");
            break;
        case OPT_MINWIDTH: {
            char *end;
            o.svg.minwidth = strtod(optarg, &end);
            if (*end || o.svg.minwidth < 0)
                usage_error("bad --minwidth '%s' (pixels)", optarg);
            break;
        }
        case OPT_COLORS:
            o.svg.colors = optarg;
            break;
        case OPT_INVERTED:
            o.svg.inverted = 1;
            break;
        case OPT_REVERSE:
            o.svg.reverse = 1;
            break;
        case OPT_ROOT: {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1])
                usage_error("bad --source-root '%s' (expected OLD=NEW)", optarg);
            if (o.nroots == 64)
                usage_error("too many --source-root options (%s)", "64");
            *eq = '\0';
            o.root_from[o.nroots] = optarg;
            o.root_to[o.nroots++] = eq + 1;
            break;
        }
        case OPT_NO_SOURCE:
            o.no_source = 1;
            break;
        case OPT_BY:
            if (strcmp(optarg, "function") && strcmp(optarg, "line"))
                usage_error("bad --by '%s' (function or line)", optarg);
            o.by = optarg;
            break;
        case OPT_BY_FUNCTION:
            o.by_function = 1;
            break;
        case OPT_MERGE_THREADS:
            o.merge_threads = 1;
            break;
        case OPT_NORMALIZE:
            o.normalize = (uint64_t)parse_num(optarg, "bad --normalize '%s' (a total)");
            break;
        case OPT_STRIP_INSTRUCTIONS:
            o.strip_instructions = 1;
            break;
        case OPT_NO_TIME:
            o.no_time = 1;
            break;
        default:
            fprintf(stderr, "Try '%s --help'.\n", prog);
            return 2;
        }
    }
    char **inputs = argv + optind;
    int ninputs = argc - optind;
    if (ninputs < 1)
        usage_error("%s: no input profile given", cmd);
    char titlebuf[512];
    pa_buf out = {0};

    if (strcmp(cmd, "flamegraph") == 0) {
        if (!o.output)
            usage_error("%s: -o OUT.html or -o OUT.svg is required", cmd);
        pa_render_format f;
        if (o.format ? pa_render_format_find(o.format, &f) != 0 || !f.report
                     : pa_render_format_for_path(o.output, &f) != 0 || !f.report)
            pa_render_format_find("html", &f);
        if (o.format && strcmp(f.name, o.format))
            usage_error("bad --format '%s' for flamegraph (html or svg)", o.format);
        pa_profile *p = load(inputs, ninputs, &o);
        o.svg.title = o.title ? o.title : "Flame Graph";
        pa_source_roots roots = {o.root_from, o.root_to, o.nroots};
        pa_render_args a = {
            .title = o.title
                         ? o.title
                         : default_title("Flamegraph", inputs, ninputs, titlebuf, sizeof titlebuf),
            .svg = &o.svg,
            .sources = o.no_source ? NULL : &roots,
        };
        pa_error err;
        pa_render_format_write(&f, p, &a, &out, &err);
        write_out(o.output, &out);
        pa_profile_free(p);
    } else if (strcmp(cmd, "diff") == 0) {
        if (ninputs != 2)
            usage_error("%s: expected BASELINE CURRENT", cmd);
        int folded = o.format && strcmp(o.format, "folded") == 0;
        if (o.format && !folded && strcmp(o.format, "html"))
            usage_error("bad --format '%s' for diff (html or folded)", o.format);
        if (!o.output && !folded)
            usage_error("%s: -o OUT.html is required", cmd);
        pa_profile *base = load(inputs, 1, &o);
        pa_profile *cur = load(inputs + 1, 1, &o);
        if (folded) {
            pa_render_diff_folded(base, cur, &out);
        } else {
            const char *b0 = strrchr(inputs[0], '/'), *b1 = strrchr(inputs[1], '/');
            snprintf(titlebuf, sizeof titlebuf, "Diff: %s → %s", b0 ? b0 + 1 : inputs[0],
                     b1 ? b1 + 1 : inputs[1]);
            pa_render_diff_html(base, cur, o.title ? o.title : titlebuf, &out);
        }
        write_out(o.output ? o.output : "-", &out);
        pa_profile_free(base);
        pa_profile_free(cur);
    } else if (strcmp(cmd, "heatmap") == 0) {
        if (!o.output)
            usage_error("%s: -o DIR is required", cmd);
        pa_profile *p = load(inputs, ninputs, &o);
        pa_heatmap_opts h = {
            .title = o.title ? o.title
                             : default_title("Heatmap", inputs, ninputs, titlebuf, sizeof titlebuf),
            .root_from = o.root_from,
            .root_to = o.root_to,
            .nroots = o.nroots,
        };
        pa_error err;
        if (pa_render_heatmap(p, &h, o.output, &err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            return 1;
        }
        pa_profile_free(p);
    } else if (strcmp(cmd, "top") == 0) {
        pa_profile *p = load(inputs, ninputs, &o);
        pa_top_opts t = {.limit = o.limit, .by_line = o.by && strcmp(o.by, "line") == 0};
        pa_render_top(p, &t, &out);
        write_out(o.output ? o.output : "-", &out);
        pa_profile_free(p);
    } else {
        if (!o.output)
            usage_error("%s: -o OUT is required", cmd);
        pa_render_format f;
        if (o.format ? pa_render_format_find(o.format, &f) != 0 || f.report
                     : pa_render_format_for_path(o.output, &f) != 0 || f.report)
            pa_render_format_find("folded", &f);
        if (o.format && strcmp(f.name, o.format)) {
            pa_buf names = {0};
            pa_render_format_names(2, &names);
            fprintf(stderr, "%s: bad --format '%s' for export (%s)\nTry '%s --help'.\n", prog,
                    o.format, names.data, prog);
            return 2;
        }
        pa_profile *p = load(inputs, ninputs, &o);
        if (o.by_function || o.merge_threads || o.normalize || o.strip_instructions || o.no_time) {
            pa_transform t = {.strip_lines = o.by_function,
                              .drop_threads = o.merge_threads,
                              .strip_instructions = o.strip_instructions,
                              .drop_time = o.no_time,
                              .scale_total = o.normalize};
            pa_profile *q = pa_profile_transform(p, &t);
            pa_profile_free(p);
            p = q;
        }
        pa_render_args a = {
            .title = o.title ? o.title
                             : default_title("Profile", inputs, ninputs, titlebuf, sizeof titlebuf),
        };
        pa_error err;
        if (pa_render_format_write(&f, p, &a, &out, &err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            return 1;
        }
        write_out(o.output, &out);
        pa_profile_free(p);
    }
    pa_buf_free(&out);
    return 0;
}
