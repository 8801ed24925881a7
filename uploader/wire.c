/* wire.c: Push and OTLP bodies (see wire.h), built as protobuf-c messages and packed once.
 * Every message lives in arrays allocated for the call and freed at its end; strings point
 * into the profile or into one arena of NUL-terminated copies (protobuf-c's strings are C
 * strings: a frame name holding a NUL byte is cut there). */
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb-c.h"
#include "push/v1/push.pb-c.h"

typedef Types__V1__LabelPair LabelPair;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Profiles__V1development__ProfilesDictionary Dictionary;
typedef Opentelemetry__Proto__Profiles__V1development__Function Function;
typedef Opentelemetry__Proto__Profiles__V1development__Location Location;
typedef Opentelemetry__Proto__Profiles__V1development__Line Line;
typedef Opentelemetry__Proto__Profiles__V1development__Stack Stack;
typedef Opentelemetry__Proto__Profiles__V1development__Sample Sample;
typedef Opentelemetry__Proto__Profiles__V1development__Mapping Mapping;
typedef Opentelemetry__Proto__Profiles__V1development__Link Link;
typedef Opentelemetry__Proto__Profiles__V1development__KeyValueAndUnit KeyValueAndUnit;
typedef Opentelemetry__Proto__Profiles__V1development__ValueType ValueType;
typedef Opentelemetry__Proto__Profiles__V1development__Profile Profile;

const char *pa_wire_type_name(const char *mode) {
    if (mode && strcmp(mode, "wall") == 0)
        return "wall";
    if (mode && strcmp(mode, "gil") == 0)
        return "gil";
    return "process_cpu";
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p)
        abort(); /* as pa_buf does: the agent thread has no way on without memory */
    return p;
}

/* Appends a packed message to out. */
static void pack_into(const ProtobufCMessage *m, pa_buf *out) {
    size_t n = protobuf_c_message_get_packed_size(m);
    pa_buf_reserve(out, n + 1);
    protobuf_c_message_pack(m, (uint8_t *)out->data + out->len);
    out->len += n;
    out->data[out->len] = 0;
}

int pa_wire_push(const pa_profile *p, const char *service, const struct pa_wire_label *labels,
                 size_t nlabels, const char *id, pa_buf *out, pa_error *err) {
    pa_buf pprof = {0};
    if (pa_pprof_encode(p, 1, &pprof, err) != 0) {
        pa_buf_free(&pprof);
        return -1;
    }
    /* Pyroscope's own labels first (pyroscope_spy as /ingest's spyName sets it), then ours. */
    size_t n = nlabels + 3;
    LabelPair *pairs = xcalloc(n, sizeof *pairs);
    LabelPair **ptrs = xcalloc(n, sizeof *ptrs);
    const char *names[3] = {"__name__", "service_name", "pyroscope_spy"};
    const char *values[3] = {pa_wire_type_name(pa_profile_meta(p, "mode")), service, "pyagent"};
    for (size_t i = 0; i < n; i++) {
        types__v1__label_pair__init(&pairs[i]);
        pairs[i].name = (char *)(i < 3 ? names[i] : labels[i - 3].name);
        pairs[i].value = (char *)(i < 3 ? values[i] : labels[i - 3].value);
        ptrs[i] = &pairs[i];
    }
    Push__V1__RawSample sample = PUSH__V1__RAW_SAMPLE__INIT;
    Push__V1__RawSample *samples[1] = {&sample};
    sample.raw_profile.data = (uint8_t *)pprof.data;
    sample.raw_profile.len = pprof.len;
    sample.id = (char *)id;
    Push__V1__RawProfileSeries series = PUSH__V1__RAW_PROFILE_SERIES__INIT;
    Push__V1__RawProfileSeries *all[1] = {&series};
    series.n_labels = n;
    series.labels = ptrs;
    series.n_samples = 1;
    series.samples = samples;
    Push__V1__PushRequest rq = PUSH__V1__PUSH_REQUEST__INIT;
    rq.n_series = 1;
    rq.series = all;
    pack_into(&rq.base, out);
    free(ptrs);
    free(pairs);
    pa_buf_free(&pprof);
    return 0;
}

/* ---- OTLP ------------------------------------------------------------------------------- */

/* The request's string table: a profile used as an interner, id + 1 being the index, since
 * index 0 must be "" (OTLP's zero value). Strings handed to protobuf-c are NUL-terminated
 * copies. */
struct strings {
    pa_profile *ids;
};

static int32_t str_index(struct strings *st, const char *s, size_t len) {
    return (int32_t)pa_profile_intern(st->ids, s, len) + 1;
}

static int32_t str_index0(struct strings *st, const char *s) {
    return str_index(st, s, strlen(s));
}

/* The profile's attribute table as it grows: string attributes (key and value string
 * indexes), index 0 the zero value. */
struct attrs {
    KeyValueAndUnit *attrs;
    AnyValue *values;
    size_t n, cap;
};

static void add_attr(struct attrs *at, int32_t key, int32_t value) {
    if (at->n == at->cap) {
        at->cap *= 2;
        at->attrs = realloc(at->attrs, at->cap * sizeof *at->attrs);
        at->values = realloc(at->values, at->cap * sizeof *at->values);
        if (!at->attrs || !at->values)
            abort();
    }
    KeyValueAndUnit *a = &at->attrs[at->n];
    AnyValue *v = &at->values[at->n++];
    opentelemetry__proto__profiles__v1development__key_value_and_unit__init(a);
    opentelemetry__proto__common__v1__any_value__init(v);
    a->key_strindex = key;
    v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX;
    v->string_value_strindex = value;
}

int pa_wire_otlp(const pa_profile *p, const char *service, const struct pa_wire_label *labels,
                 size_t nlabels, time_t from, time_t until, const uint8_t *profile_id, pa_buf *out,
                 pa_error *err) {
    (void)err;
    struct strings st = {pa_profile_new()};
    size_t nframes = pa_profile_frame_count(p), nstacks = pa_profile_stack_count(p);

    /* Index 0 of every table is its zero value, which the others' zero indexes mean. */
    Mapping mapping0 = OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__MAPPING__INIT;
    Mapping *mappings[1] = {&mapping0};
    Link link0 = OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__LINK__INIT;
    Link *links[1] = {&link0};

    /* One Function and one Location (of one Line) per frame string: frame id + 1. Functions
     * are not shared between lines of one function: the table stays one pass, and Pyroscope
     * and pprof tools merge by name and file anyway. */
    Function *funcs = xcalloc(nframes + 1, sizeof *funcs);
    Function **fptrs = xcalloc(nframes + 1, sizeof *fptrs);
    Location *locs = xcalloc(nframes + 1, sizeof *locs);
    Location **lptrs = xcalloc(nframes + 1, sizeof *lptrs);
    Line *lines = xcalloc(nframes + 1, sizeof *lines);
    Line **lineptrs = xcalloc(nframes + 1, sizeof *lineptrs);
    uint32_t *thread_attr = xcalloc(nframes + 1, sizeof *thread_attr); /* frame -> attribute */
    for (size_t i = 0; i <= nframes; i++) {
        opentelemetry__proto__profiles__v1development__function__init(&funcs[i]);
        opentelemetry__proto__profiles__v1development__location__init(&locs[i]);
        opentelemetry__proto__profiles__v1development__line__init(&lines[i]);
        fptrs[i] = &funcs[i];
        lptrs[i] = &locs[i];
    }
    /* Attributes: 0 is the zero value, then one thread.name per thread and one per label of
     * each labels frame. */
    struct attrs at = {xcalloc(16, sizeof *at.attrs), xcalloc(16, sizeof *at.values), 1, 16};
    opentelemetry__proto__profiles__v1development__key_value_and_unit__init(&at.attrs[0]);
    uint32_t *label_first = xcalloc(nframes + 1, sizeof *label_first);
    uint32_t *label_count = xcalloc(nframes + 1, sizeof *label_count);
    int32_t thread_key = str_index0(&st, "thread.name");
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        Function *f = &funcs[id + 1];
        int python = fi.file && fi.kind != PA_FRAME_NATIVE && fi.kind != PA_FRAME_THREAD &&
                     fi.kind != PA_FRAME_SYNTHETIC;
        f->name_strindex = python ? str_index(&st, fi.name, fi.name_len) : str_index(&st, s, len);
        f->system_name_strindex = f->name_strindex;
        if (python)
            f->filename_strindex = str_index(&st, fi.file, fi.file_len);
        Line *ln = &lines[id + 1];
        ln->function_index = (int32_t)id + 1;
        ln->line = fi.line;
        lineptrs[id + 1] = ln;
        locs[id + 1].n_lines = 1;
        locs[id + 1].lines = &lineptrs[id + 1];
        if (fi.kind == PA_FRAME_THREAD) {
            thread_attr[id] = (uint32_t)at.n;
            add_attr(&at, thread_key, str_index(&st, fi.name, fi.name_len));
        } else if (len >= PA_LABELS_PREFIX_LEN &&
                   memcmp(s, PA_LABELS_PREFIX, PA_LABELS_PREFIX_LEN) == 0) {
            /* A labels frame: one string attribute per label (used where it is a stack's
             * labels frame, pa_profile_labels_frame). */
            label_first[id] = (uint32_t)at.n;
            char *text = xcalloc(len + 1, 1), *rest = text + PA_LABELS_PREFIX_LEN, *k, *v;
            memcpy(text, s, len);
            while (pa_series_split(&rest, &k, &v) == 1)
                add_attr(&at, str_index0(&st, k), str_index0(&st, v));
            label_count[id] = (uint32_t)at.n - label_first[id];
            free(text);
        }
    }
    KeyValueAndUnit *attrs = at.attrs;
    AnyValue *attr_values = at.values;
    size_t nattrs = at.n;
    KeyValueAndUnit **aptrs = xcalloc(nattrs, sizeof *aptrs);
    for (size_t i = 0; i < nattrs; i++) {
        if (i > 0)
            attrs[i].value = &attr_values[i];
        aptrs[i] = &attrs[i];
    }

    /* Stacks (leaf first, as pprof's) and samples: index i + 1 for stack i. */
    const char *mode = pa_profile_meta(p, "mode");
    const char *rate_s = pa_profile_meta(p, "rate");
    double rate = rate_s ? atof(rate_s) : 0;
    int64_t period = rate > 0 ? (int64_t)(1e9 / rate) : 0;
    /* cpu: counts, with a cpu/nanoseconds period (Pyroscope turns "samples:count:cpu:
     * nanoseconds" into process_cpu's CPU time, as it does for OpenTelemetry's eBPF
     * profiler); wall and gil: their time, named by the period type (Pyroscope's __name__). */
    int time_values = mode && (strcmp(mode, "wall") == 0 || strcmp(mode, "gil") == 0) && period;
    const char *time_type = time_values ? mode : "cpu";
    Stack *stacks = xcalloc(nstacks + 1, sizeof *stacks);
    Stack **sptrs = xcalloc(nstacks + 1, sizeof *sptrs);
    Sample *samples = xcalloc(nstacks, sizeof *samples);
    Sample **smptrs = xcalloc(nstacks, sizeof *smptrs);
    int64_t *values = xcalloc(nstacks, sizeof *values);
    int32_t **sample_attrs = xcalloc(nstacks, sizeof *sample_attrs);
    int32_t **loc_lists = xcalloc(nstacks, sizeof *loc_lists);
    opentelemetry__proto__profiles__v1development__stack__init(&stacks[0]);
    sptrs[0] = &stacks[0];
    for (size_t s = 0; s < nstacks; s++) {
        size_t depth;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, s, &depth, &count);
        Stack *k = &stacks[s + 1];
        opentelemetry__proto__profiles__v1development__stack__init(k);
        int li = pa_profile_labels_frame(p, ids, depth);
        loc_lists[s] = xcalloc(depth, sizeof **loc_lists);
        size_t nloc = 0;
        for (size_t j = depth; j-- > 0;) /* leaf first; the labels frame is attributes */
            if ((int)j != li)
                loc_lists[s][nloc++] = (int32_t)ids[j] + 1;
        k->n_location_indices = nloc;
        k->location_indices = loc_lists[s];
        sptrs[s + 1] = k;
        Sample *sm = &samples[s];
        opentelemetry__proto__profiles__v1development__sample__init(sm);
        sm->stack_index = (int32_t)s + 1;
        values[s] = (int64_t)count * (time_values ? period : 1);
        sm->n_values = 1;
        sm->values = &values[s];
        uint32_t nl = li >= 0 ? label_count[ids[li]] : 0;
        sample_attrs[s] = xcalloc(nl + 1, sizeof **sample_attrs);
        if (depth > 0 && thread_attr[ids[0]])
            sample_attrs[s][sm->n_attribute_indices++] = (int32_t)thread_attr[ids[0]];
        for (uint32_t j = 0; j < nl; j++)
            sample_attrs[s][sm->n_attribute_indices++] = (int32_t)(label_first[ids[li]] + j);
        sm->attribute_indices = sample_attrs[s];
        smptrs[s] = sm;
    }

    ValueType sample_type = OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__VALUE_TYPE__INIT;
    ValueType period_type = OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__VALUE_TYPE__INIT;
    sample_type.type_strindex = str_index0(&st, time_values ? time_type : "samples");
    sample_type.unit_strindex = str_index0(&st, time_values ? "nanoseconds" : "count");
    period_type.type_strindex = str_index0(&st, time_type);
    period_type.unit_strindex = str_index0(&st, "nanoseconds");
    Profile prof = OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__PROFILE__INIT;
    Profile *profs[1] = {&prof};
    prof.sample_type = &sample_type;
    prof.n_samples = nstacks;
    prof.samples = smptrs;
    prof.time_unix_nano = (uint64_t)from * 1000000000u;
    prof.duration_nano = until > from ? (uint64_t)(until - from) * 1000000000u : 0;
    if (profile_id)
        prof.profile_id = (ProtobufCBinaryData){16, (uint8_t *)profile_id};
    if (period) {
        prof.period_type = &period_type;
        prof.period = period;
    }

    /* The series' labels are the resource's attributes; service.name is the application. */
    size_t nres = nlabels + 1;
    KeyValue *kvs = xcalloc(nres, sizeof *kvs);
    KeyValue **kvptrs = xcalloc(nres, sizeof *kvptrs);
    AnyValue *kvvals = xcalloc(nres, sizeof *kvvals);
    for (size_t i = 0; i < nres; i++) {
        opentelemetry__proto__common__v1__key_value__init(&kvs[i]);
        opentelemetry__proto__common__v1__any_value__init(&kvvals[i]);
        kvs[i].key = (char *)(i == 0 ? "service.name" : labels[i - 1].name);
        kvvals[i].value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
        kvvals[i].string_value = (char *)(i == 0 ? service : labels[i - 1].value);
        kvs[i].value = &kvvals[i];
        kvptrs[i] = &kvs[i];
    }
    Opentelemetry__Proto__Resource__V1__Resource resource =
        OPENTELEMETRY__PROTO__RESOURCE__V1__RESOURCE__INIT;
    resource.n_attributes = nres;
    resource.attributes = kvptrs;
    Opentelemetry__Proto__Common__V1__InstrumentationScope scope =
        OPENTELEMETRY__PROTO__COMMON__V1__INSTRUMENTATION_SCOPE__INIT;
    scope.name = (char *)"pyagent";
    scope.version = (char *)"0.1";
    Opentelemetry__Proto__Profiles__V1development__ScopeProfiles sp =
        OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__SCOPE_PROFILES__INIT;
    Opentelemetry__Proto__Profiles__V1development__ScopeProfiles *sps[1] = {&sp};
    sp.scope = &scope;
    sp.n_profiles = 1;
    sp.profiles = profs;
    Opentelemetry__Proto__Profiles__V1development__ResourceProfiles rp =
        OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__RESOURCE_PROFILES__INIT;
    Opentelemetry__Proto__Profiles__V1development__ResourceProfiles *rps[1] = {&rp};
    rp.resource = &resource;
    rp.n_scope_profiles = 1;
    rp.scope_profiles = sps;

    /* The string table last: every string is interned by now. */
    size_t nstr = pa_profile_frame_count(st.ids) + 1;
    char **strs = xcalloc(nstr, sizeof *strs);
    pa_buf arena = {0};
    size_t *offs = xcalloc(nstr, sizeof *offs);
    pa_buf_append(&arena, "", 1);
    for (uint32_t i = 1; i < nstr; i++) {
        size_t len;
        const char *s = pa_profile_frame(st.ids, i - 1, &len);
        offs[i] = arena.len;
        pa_buf_append(&arena, s, len);
        pa_buf_append(&arena, "", 1);
    }
    for (size_t i = 0; i < nstr; i++)
        strs[i] = arena.data + offs[i];

    Dictionary dict = OPENTELEMETRY__PROTO__PROFILES__V1DEVELOPMENT__PROFILES_DICTIONARY__INIT;
    dict.n_mapping_table = 1;
    dict.mapping_table = mappings;
    dict.n_location_table = nframes + 1;
    dict.location_table = lptrs;
    dict.n_function_table = nframes + 1;
    dict.function_table = fptrs;
    dict.n_link_table = 1;
    dict.link_table = links;
    dict.n_string_table = nstr;
    dict.string_table = strs;
    dict.n_attribute_table = nattrs;
    dict.attribute_table = aptrs;
    dict.n_stack_table = nstacks + 1;
    dict.stack_table = sptrs;
    Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceRequest rq =
        OPENTELEMETRY__PROTO__COLLECTOR__PROFILES__V1DEVELOPMENT__EXPORT_PROFILES_SERVICE_REQUEST__INIT;
    rq.n_resource_profiles = 1;
    rq.resource_profiles = rps;
    rq.dictionary = &dict;
    pack_into(&rq.base, out);

    for (size_t s = 0; s < nstacks; s++) {
        free(loc_lists[s]);
        free(sample_attrs[s]);
    }
    free(loc_lists);
    free(sample_attrs);
    free(label_first);
    free(label_count);
    free(values);
    free(smptrs);
    free(samples);
    free(sptrs);
    free(stacks);
    free(aptrs);
    free(attr_values);
    free(attrs);
    free(thread_attr);
    free(lineptrs);
    free(lines);
    free(lptrs);
    free(locs);
    free(fptrs);
    free(funcs);
    free(kvvals);
    free(kvptrs);
    free(kvs);
    free(offs);
    free(strs);
    pa_buf_free(&arena);
    pa_profile_free(st.ids);
    return 0;
}

int64_t pa_wire_otlp_rejected(const void *body, size_t len, pa_error *err) {
    err->msg[0] = 0;
    Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceResponse *r =
        opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__unpack(
            NULL, len, body);
    if (!r)
        return 0;
    int64_t n = 0;
    if (r->partial_success) {
        n = r->partial_success->rejected_profiles;
        pa_fail(err, "%s",
                r->partial_success->error_message ? r->partial_success->error_message : "");
    }
    opentelemetry__proto__collector__profiles__v1development__export_profiles_service_response__free_unpacked(
        r, NULL);
    return n;
}
