/* connect.c: Connect's unary codecs (see connect.h). The JSON side walks the generated
 * descriptors, so every message of proto/ has it without code of its own. Input is untrusted:
 * the JSON reader bounds its depth and checks every step, and what it builds is allocated as
 * protobuf-c's own unpacker allocates (malloc), so one free_unpacked releases either. */
#include "connect.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int pa_coll_connect_codec(const char *ct, enum pa_coll_codec *codec) {
    if (!ct)
        return -1;
    size_t n = strcspn(ct, ";");
    while (n > 0 && ct[n - 1] == ' ')
        n--;
    static const char *const proto[] = {"application/proto", "application/x-protobuf",
                                        "application/protobuf"};
    for (size_t i = 0; i < sizeof proto / sizeof proto[0]; i++)
        if (n == strlen(proto[i]) && strncasecmp(ct, proto[i], n) == 0) {
            *codec = PA_CODEC_PROTO;
            return 0;
        }
    if (n == 16 && strncasecmp(ct, "application/json", n) == 0) {
        *codec = PA_CODEC_JSON;
        return 0;
    }
    return -1;
}

/* ---- field names ----------------------------------------------------------------------- */

/* protoc's JSON name: underscores dropped, the letter after each one upper-cased. */
static void json_name(const char *name, char *out, size_t outlen) {
    size_t o = 0;
    int up = 0;
    for (const char *s = name; *s && o + 1 < outlen; s++) {
        if (*s == '_') {
            up = 1;
            continue;
        }
        out[o++] = up && *s >= 'a' && *s <= 'z' ? (char)(*s - 32) : *s;
        up = 0;
    }
    out[o] = 0;
}

static const ProtobufCFieldDescriptor *field_by_json(const ProtobufCMessageDescriptor *d,
                                                     const char *key, size_t klen) {
    char jn[128];
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        json_name(f->name, jn, sizeof jn);
        if ((strlen(jn) == klen && memcmp(jn, key, klen) == 0) ||
            (strlen(f->name) == klen && memcmp(f->name, key, klen) == 0))
            return f;
    }
    return NULL;
}

/* ---- writing JSON ---------------------------------------------------------------------- */

static size_t elem_size(ProtobufCType t) {
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    }
    return 0;
}

static void put_base64(pa_buf *b, const uint8_t *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {tab[v >> 18 & 63], tab[v >> 12 & 63], i + 1 < n ? tab[v >> 6 & 63] : '=',
                     i + 2 < n ? tab[v & 63] : '='};
        pa_buf_append(b, q, 4);
    }
}

static void put_double(pa_buf *b, double v) {
    if (isnan(v))
        pa_buf_puts(b, "\"NaN\"");
    else if (isinf(v))
        pa_buf_puts(b, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    else
        pa_buf_printf(b, "%.17g", v);
}

static void put_value(pa_buf *b, const ProtobufCFieldDescriptor *f, const void *v) {
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        pa_buf_printf(b, "%" PRId32, *(const int32_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        pa_buf_printf(b, "%" PRIu32, *(const uint32_t *)v);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        pa_buf_printf(b, "\"%" PRId64 "\"", *(const int64_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        pa_buf_printf(b, "\"%" PRIu64 "\"", *(const uint64_t *)v);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        put_double(b, *(const float *)v);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        put_double(b, *(const double *)v);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        pa_buf_puts(b, *(const protobuf_c_boolean *)v ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)v);
        if (ev)
            pa_buf_printf(b, "\"%s\"", ev->name);
        else
            pa_buf_printf(b, "%d", *(const int *)v);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)v;
        pa_buf_puts(b, "\"");
        pa_buf_json_str(b, s ? s : "", s ? strlen(s) : 0);
        pa_buf_puts(b, "\"");
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = v;
        pa_buf_puts(b, "\"");
        put_base64(b, bd->data, bd->len);
        pa_buf_puts(b, "\"");
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)v;
        if (m)
            pa_coll_pb_to_json(m, b);
        else
            pa_buf_puts(b, "{}");
        break;
    }
    }
}

/* A singular field at its zero value is left out (protobuf's JSON mapping, proto3). */
static int is_zero(const ProtobufCFieldDescriptor *f, const void *v) {
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)v;
        return !s || !*s;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)v)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(void *const *)v == NULL;
    default: {
        static const unsigned char zero[8];
        return memcmp(v, zero, elem_size(f->type)) == 0;
    }
    }
}

void pa_coll_pb_to_json(const ProtobufCMessage *m, pa_buf *b) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    int first = 1;
    char jn[128];
    pa_buf_puts(b, "{");
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *v = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (*(const size_t *)(base + f->quantifier_offset) == 0)
                continue;
        } else if (is_zero(f, v)) {
            continue;
        }
        json_name(f->name, jn, sizeof jn);
        pa_buf_printf(b, "%s\"%s\":", first ? "" : ",", jn);
        first = 0;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)v;
            size_t es = elem_size(f->type);
            pa_buf_puts(b, "[");
            for (size_t k = 0; k < n; k++) {
                if (k)
                    pa_buf_puts(b, ",");
                put_value(b, f, arr + k * es);
            }
            pa_buf_puts(b, "]");
        } else {
            put_value(b, f, v);
        }
    }
    pa_buf_puts(b, "}");
}

/* ---- reading JSON ---------------------------------------------------------------------- */

struct jr {
    const char *start, *p, *end;
    int depth;
    pa_error *err;
    int bad;
};

static int jfail(struct jr *r, const char *what) {
    if (!r->bad)
        pa_fail(r->err, "JSON: %s at byte %zu", what, (size_t)(r->p - r->start));
    r->bad = 1;
    return -1;
}

static void ws(struct jr *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

static int lit(struct jr *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

static void put_utf8(pa_buf *b, uint32_t c) {
    unsigned char u[4];
    size_t n;
    if (c < 0x80)
        u[0] = (unsigned char)c, n = 1;
    else if (c < 0x800)
        u[0] = (unsigned char)(0xC0 | c >> 6), u[1] = (unsigned char)(0x80 | (c & 63)), n = 2;
    else if (c < 0x10000)
        u[0] = (unsigned char)(0xE0 | c >> 12), u[1] = (unsigned char)(0x80 | (c >> 6 & 63)),
        u[2] = (unsigned char)(0x80 | (c & 63)), n = 3;
    else
        u[0] = (unsigned char)(0xF0 | c >> 18), u[1] = (unsigned char)(0x80 | (c >> 12 & 63)),
        u[2] = (unsigned char)(0x80 | (c >> 6 & 63)), u[3] = (unsigned char)(0x80 | (c & 63)),
        n = 4;
    pa_buf_append(b, u, n);
}

static int hex4(struct jr *r, uint32_t *out) {
    if (r->end - r->p < 4)
        return jfail(r, "a short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *r->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return jfail(r, "a bad \\u escape");
    }
    *out = v;
    return 0;
}

/* A JSON string into out (NUL-terminated, not counted in out->len). */
static int jstring(struct jr *r, pa_buf *out) {
    out->len = 0;
    ws(r);
    if (r->p >= r->end || *r->p != '"')
        return jfail(r, "a string was expected");
    r->p++;
    while (r->p < r->end && *r->p != '"') {
        unsigned char c = (unsigned char)*r->p++;
        if (c < 0x20)
            return jfail(r, "a control character in a string");
        if (c != '\\') {
            pa_buf_append(out, &c, 1);
            continue;
        }
        if (r->p >= r->end)
            break;
        char e = *r->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            pa_buf_append(out, &to[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        if (e != 'u')
            return jfail(r, "a bad escape");
        uint32_t cp;
        if (hex4(r, &cp))
            return -1;
        if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t lo;
            if (!lit(r, "\\u") || hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return jfail(r, "a lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            return jfail(r, "a lone surrogate");
        }
        put_utf8(out, cp);
    }
    if (r->p >= r->end)
        return jfail(r, "an unterminated string");
    r->p++;
    pa_buf_reserve(out, 1);
    out->data[out->len] = 0;
    return 0;
}

static int jskip(struct jr *r);

static int jskip_container(struct jr *r, char close) {
    if (++r->depth > 64)
        return jfail(r, "nesting deeper than 64");
    r->p++;
    ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        r->depth--;
        return 0;
    }
    pa_buf key = {0};
    for (;;) {
        if (close == '}') {
            if (jstring(r, &key))
                break;
            ws(r);
            if (r->p >= r->end || *r->p++ != ':') {
                jfail(r, "':' was expected");
                break;
            }
        }
        if (jskip(r))
            break;
        ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == close) {
            r->p++;
            r->depth--;
            pa_buf_free(&key);
            return 0;
        }
        jfail(r, "',' or the end of a container was expected");
        break;
    }
    pa_buf_free(&key);
    return -1;
}

static int jskip(struct jr *r) {
    ws(r);
    if (r->p >= r->end)
        return jfail(r, "a value was expected");
    if (*r->p == '{')
        return jskip_container(r, '}');
    if (*r->p == '[')
        return jskip_container(r, ']');
    if (*r->p == '"') {
        pa_buf s = {0};
        int rc = jstring(r, &s);
        pa_buf_free(&s);
        return rc;
    }
    if (lit(r, "true") || lit(r, "false") || lit(r, "null"))
        return 0;
    const char *s = r->p;
    while (r->p < r->end && strchr("+-0123456789.eE", *r->p))
        r->p++;
    return r->p > s ? 0 : jfail(r, "a value was expected");
}

/* A number, given bare or as a string (protobuf's JSON mapping allows both). */
static int jnumber(struct jr *r, pa_buf *tmp, double *d, int64_t *i, uint64_t *u, int *is_int) {
    ws(r);
    const char *s;
    size_t n;
    if (r->p < r->end && *r->p == '"') {
        if (jstring(r, tmp))
            return -1;
        s = tmp->data;
        n = tmp->len;
    } else {
        s = r->p;
        while (r->p < r->end && strchr("+-0123456789.eE", *r->p))
            r->p++;
        n = (size_t)(r->p - s);
    }
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return jfail(r, "a number was expected");
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    *is_int = strpbrk(buf, ".eE") == NULL;
    if (*is_int) {
        if (buf[0] == '-') {
            *i = strtoll(buf, &end, 10);
            *u = (uint64_t)*i;
        } else {
            *u = strtoull(buf, &end, 10);
            *i = (int64_t)*u;
        }
        *d = (double)*i;
    } else {
        *d = strtod(buf, &end);
        /* An integer field given 1e30: saturated, not converted out of range. */
        *i = isnan(*d) ? 0 : *d >= 9.2e18 ? INT64_MAX : *d <= -9.2e18 ? INT64_MIN : (int64_t)*d;
        *u = (uint64_t)*i;
    }
    if (*end || errno)
        return jfail(r, "a malformed or out-of-range number");
    return 0;
}

int pa_coll_b64val(int c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

static ProtobufCMessage *jmessage(struct jr *r, const ProtobufCMessageDescriptor *d);

/* One value of field f into dst (an element of the field's type). */
static int jvalue(struct jr *r, const ProtobufCFieldDescriptor *f, void *dst) {
    pa_buf tmp = {0};
    int rc = 0;
    double dv = 0;
    int64_t iv = 0;
    uint64_t uv = 0;
    int is_int = 0;
    ws(r);
    switch (f->type) {
    case PROTOBUF_C_TYPE_BOOL:
        if (lit(r, "true"))
            *(protobuf_c_boolean *)dst = 1;
        else if (lit(r, "false"))
            *(protobuf_c_boolean *)dst = 0;
        else
            rc = jfail(r, "true or false was expected");
        break;
    case PROTOBUF_C_TYPE_STRING:
        if ((rc = jstring(r, &tmp)) == 0) {
            char *s = malloc(tmp.len + 1);
            if (!s)
                abort();
            memcpy(s, tmp.data, tmp.len + 1);
            *(char **)dst = s;
        }
        break;
    case PROTOBUF_C_TYPE_BYTES: {
        if ((rc = jstring(r, &tmp)) != 0)
            break;
        ProtobufCBinaryData *bd = dst;
        bd->data = malloc(tmp.len + 1);
        if (!bd->data)
            abort();
        bd->len = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (size_t k = 0; k < tmp.len && tmp.data[k] != '='; k++) {
            int v = pa_coll_b64val((unsigned char)tmp.data[k]);
            if (v < 0) {
                rc = jfail(r, "bytes that are not base64");
                break;
            }
            acc = acc << 6 | (uint32_t)v;
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                bd->data[bd->len++] = (uint8_t)(acc >> bits);
            }
        }
        break;
    }
    case PROTOBUF_C_TYPE_ENUM:
        if (r->p < r->end && *r->p == '"') {
            if ((rc = jstring(r, &tmp)) != 0)
                break;
            const ProtobufCEnumValue *ev =
                protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, tmp.data);
            if (!ev)
                rc = jfail(r, "an unknown enum value");
            else
                *(int *)dst = ev->value;
        } else if ((rc = jnumber(r, &tmp, &dv, &iv, &uv, &is_int)) == 0) {
            *(int *)dst = (int)iv;
        }
        break;
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage *m = jmessage(r, f->descriptor);
        if (!m)
            rc = -1;
        *(ProtobufCMessage **)dst = m;
        break;
    }
    default:
        if ((rc = jnumber(r, &tmp, &dv, &iv, &uv, &is_int)) != 0)
            break;
        switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
            *(int32_t *)dst = (int32_t)iv;
            break;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
            *(uint32_t *)dst = (uint32_t)uv;
            break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
            *(int64_t *)dst = iv;
            break;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
            *(uint64_t *)dst = uv;
            break;
        case PROTOBUF_C_TYPE_FLOAT:
            *(float *)dst = (float)dv;
            break;
        case PROTOBUF_C_TYPE_DOUBLE:
            *(double *)dst = dv;
            break;
        default:
            break;
        }
    }
    pa_buf_free(&tmp);
    return rc;
}

/* Frees what a field holds before it is set again (a key given twice). */
static void clear_field(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    char *base = (char *)m;
    void *v = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return; /* repeated keys append */
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        char *s = *(char **)v;
        if (s && s != f->default_value)
            free(s);
        *(const void **)v = f->default_value;
    } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
        free(((ProtobufCBinaryData *)v)->data);
        memset(v, 0, sizeof(ProtobufCBinaryData));
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        protobuf_c_message_free_unpacked(*(ProtobufCMessage **)v, NULL);
        *(void **)v = NULL;
    }
}

static int jfield(struct jr *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    char *base = (char *)m;
    ws(r);
    if (lit(r, "null"))
        return 0;
    if (f->label != PROTOBUF_C_LABEL_REPEATED) {
        clear_field(m, f);
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            /* Another member of the same oneof set before is released first. */
            const ProtobufCMessageDescriptor *d = m->descriptor;
            uint32_t cur = *(uint32_t *)(base + f->quantifier_offset);
            const ProtobufCFieldDescriptor *old =
                cur ? protobuf_c_message_descriptor_get_field(d, cur) : NULL;
            if (old && old != f)
                clear_field(m, old);
            *(uint32_t *)(base + f->quantifier_offset) = f->id;
        }
        return jvalue(r, f, base + f->offset);
    }
    if (r->p >= r->end || *r->p != '[')
        return jfail(r, "an array was expected");
    if (++r->depth > 64)
        return jfail(r, "nesting deeper than 64");
    r->p++;
    size_t es = elem_size(f->type);
    size_t *n = (size_t *)(base + f->quantifier_offset);
    char **arr = (char **)(base + f->offset);
    size_t cap = *n;
    ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        r->depth--;
        return 0;
    }
    for (;;) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char *na = realloc(*arr, cap * es);
            if (!na)
                abort();
            *arr = na;
        }
        memset(*arr + *n * es, 0, es);
        if (f->type == PROTOBUF_C_TYPE_STRING)
            *(const void **)(*arr + *n * es) = NULL;
        int rc = jvalue(r, f, *arr + *n * es);
        (*n)++; /* counted even when it failed: what it holds is freed with the message */
        if (rc)
            return -1;
        ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            r->depth--;
            return 0;
        }
        return jfail(r, "',' or ']' was expected");
    }
}

static ProtobufCMessage *jmessage(struct jr *r, const ProtobufCMessageDescriptor *d) {
    ws(r);
    if (r->p >= r->end || *r->p != '{') {
        jfail(r, "an object was expected");
        return NULL;
    }
    if (++r->depth > 64) {
        jfail(r, "nesting deeper than 64");
        return NULL;
    }
    r->p++;
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    if (!m)
        abort();
    d->message_init(m);
    pa_buf key = {0};
    ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        r->depth--;
        return m;
    }
    for (;;) {
        if (jstring(r, &key))
            break;
        ws(r);
        if (r->p >= r->end || *r->p++ != ':') {
            jfail(r, "':' was expected");
            break;
        }
        const ProtobufCFieldDescriptor *f = field_by_json(d, key.data, key.len);
        if (f ? jfield(r, m, f) : jskip(r)) /* unknown fields are skipped, as Connect's Go does */
            break;
        ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            r->depth--;
            pa_buf_free(&key);
            return m;
        }
        jfail(r, "',' or '}' was expected");
        break;
    }
    pa_buf_free(&key);
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

int pa_coll_pb_utf8_check(const ProtobufCMessage *m, pa_error *err) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        size_t n = 1;
        const char *arr = base + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            arr = *(char *const *)arr;
        }
        for (size_t k = 0; k < n; k++) {
            const void *e = *(void *const *)(arr + k * sizeof(void *));
            if (!e)
                continue;
            if (f->type == PROTOBUF_C_TYPE_STRING && !pa_utf8_valid(e, strlen(e))) {
                pa_fail(err, "%s.%s: a string field contains invalid UTF-8", d->name, f->name);
                return -1;
            }
            if (f->type == PROTOBUF_C_TYPE_MESSAGE && pa_coll_pb_utf8_check(e, err))
                return -1;
        }
    }
    return 0;
}

ProtobufCMessage *pa_coll_connect_decode(const ProtobufCMessageDescriptor *d,
                                         enum pa_coll_codec codec, const uint8_t *body, size_t len,
                                         pa_error *err) {
    ProtobufCMessage *m;
    if (codec == PA_CODEC_PROTO) {
        m = protobuf_c_message_unpack(d, NULL, len, body);
        if (!m) {
            pa_fail(err, "the body is not a %s message (protobuf)", d->name);
            return NULL;
        }
    } else {
        struct jr r = {(const char *)body, (const char *)body, (const char *)body + len, 0, err, 0};
        m = len ? jmessage(&r, d) : NULL;
        if (!len) {
            m = calloc(1, d->sizeof_message);
            if (!m)
                abort();
            d->message_init(m);
        }
        if (m) {
            ws(&r);
            if (r.p != r.end) {
                pa_fail(err, "JSON: text after the message");
                protobuf_c_message_free_unpacked(m, NULL);
                return NULL;
            }
        } else {
            return NULL;
        }
    }
    if (pa_coll_pb_utf8_check(m, err)) {
        protobuf_c_message_free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void pa_coll_connect_respond(struct pa_coll_response *r, enum pa_coll_codec codec,
                             const ProtobufCMessage *m) {
    pa_buf_free(&r->body);
    r->status = 200;
    if (codec == PA_CODEC_JSON) {
        r->content_type = "application/json";
        pa_coll_pb_to_json(m, &r->body);
        return;
    }
    r->content_type = "application/proto";
    size_t n = protobuf_c_message_get_packed_size(m);
    pa_buf_reserve(&r->body, n + 1);
    protobuf_c_message_pack(m, (uint8_t *)r->body.data);
    r->body.len = n;
}

void pa_coll_connect_error(struct pa_coll_response *r, int status, const char *msg) {
    /* Connect's codes and the HTTP statuses its spec gives them. */
    const char *code = "internal";
    int http = 500;
    switch (status) {
    case 400:
    case 413:
    case 422:
        code = "invalid_argument", http = 400;
        break;
    case 401:
        code = "unauthenticated", http = 401;
        break;
    case 404:
        code = "not_found", http = 404;
        break;
    case 405:
    case 415:
        code = "unimplemented", http = 501;
        break;
    case 503:
        code = "unavailable", http = 503;
        break;
    }
    pa_buf_free(&r->body);
    r->status = http;
    r->content_type = "application/json";
    pa_buf_printf(&r->body, "{\"code\":\"%s\",\"message\":\"", code);
    pa_buf_json_str(&r->body, msg, strlen(msg));
    pa_buf_puts(&r->body, "\"}");
}
