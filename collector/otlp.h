/* otlp.h: OpenTelemetry profiles over OTLP/HTTP (POST /v1development/profiles, protobuf),
 * stored with Grafana Pyroscope's rules for them (otlp.c). */
#ifndef PA_COLL_OTLP_H
#define PA_COLL_OTLP_H

#include "http.h"
#include "push.h"
#include "store.h"

void pa_coll_handle_otlp(struct pa_coll_store *st, const struct pa_coll_proto_request *rq,
                         struct pa_coll_response *r);

#endif
