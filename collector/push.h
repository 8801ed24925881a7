/* push.h: Grafana Pyroscope's Push API (POST /push.v1.PusherService/Push, Connect unary,
 * binary protobuf or JSON) and what OTLP shares with it: turning a series' labels into the
 * collector's series name under Pyroscope's label rules, and storing profiles all or none.
 *
 * A PushRequest's series name their service (service_name) and profile type (__name__:
 * process_cpu, wall, ...); each raw sample is a pprof profile (gzip-compressed or not). Each
 * becomes one stored upload of series "SERVICE.MODE" (MODE: cpu for process_cpu, else the
 * type's name) with the other labels, read by the /ingest path's own decoder (ingest.h), so
 * the rules and the stored form are those of /ingest. No I/O but the store. */
#ifndef PA_COLL_PUSH_H
#define PA_COLL_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "body.h"
#include "http.h"
#include "ingest.h"
#include "store.h"

struct pa_coll_proto_request {
    const char *content_type, *content_encoding;
    const uint8_t *body;
    size_t body_len;
    size_t max_decompressed;
    struct pa_coll_budget *budget;
    int64_t now;
    struct pa_coll_ingest_rules rules;
};

void pa_coll_handle_push(struct pa_coll_store *st, const struct pa_coll_proto_request *rq,
                         struct pa_coll_response *r);

/* A series name "SERVICE.MODE{k=v,...}" (MODE from the profile type's name; none when type
 * is NULL) from labels under Grafana Pyroscope's rules (pkg/validation): label names
 * [A-Za-z_][A-Za-z0-9_]* once '.' is read as '_', at most 1024 bytes, values at most 2048,
 * no name twice, at most 30 labels counting Pyroscope's own; names starting with "__" are
 * Pyroscope's and are not kept. 0, or 400 with err. */
struct pa_coll_pair {
    const char *name, *value;
};
int pa_coll_push_name(pa_buf *out, const char *service, const char *type,
                      const struct pa_coll_pair *labels, size_t n, pa_error *err);

/* Profiles decoded and checked, waiting to be stored together. */
struct pa_coll_batch {
    struct pa_coll_ingest_result *v;
    char **spy; /* per profile: the client (pyroscope_spy, else the protocol) */
    char **id;  /* per profile: the client's id of it (store.h), or NULL */
    size_t n, cap;
};
/* Decodes one pprof (gzip or plain) of series `name` covering [from, until) into the batch;
 * time_ns is the profile's own time, checked against rq's rules (0: none, taken as of now);
 * id (NULL or "": none) names it, so that a resend is stored once. 0, or a status (400, 413,
 * 422, 503) with err. */
int pa_coll_batch_add(struct pa_coll_batch *b, const char *name, const char *spy, const char *id,
                      int64_t from, int64_t until, uint64_t time_ns, int64_t rate,
                      const uint8_t *pprof, size_t len, const struct pa_coll_proto_request *rq,
                      pa_error *err);
/* Stores every profile of the batch if status is 0 (nothing was refused), then frees it.
 * Returns status, or 503 with err when the store could not commit. */
int pa_coll_batch_finish(struct pa_coll_store *st, struct pa_coll_batch *b, int status,
                         pa_error *err);

/* The request message of rq: Content-Encoding (gzip or identity) peeled, then decoded in
 * the codec (connect.h). NULL with *status (400, 413, 415, 422, 503) and err. */
ProtobufCMessage *pa_coll_proto_decode(const struct pa_coll_proto_request *rq,
                                       const ProtobufCMessageDescriptor *d, int codec, int *status,
                                       pa_error *err);

#endif
