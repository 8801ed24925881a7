/* wire.h: the bodies of the upload protocols other than /ingest, encoded with the code
 * protoc-c generates from proto/ (protobuf-c's runtime is linked in statically).
 *
 * These live in libpyagent-wire.so, not in the agent: the agent (send.c) loads it beside
 * itself when a server is configured and calls them through the table PA_WIRE_API names
 * (docs/architecture.md, "The wire encoders apart").
 *
 * Normal context. A body is built from one profile (the samples of one interval, frames
 * already module-qualified) and the series' labels:
 *   - push: Grafana Pyroscope's PushRequest, one series (labels __name__, service_name and
 *     the others) holding the profile as gzip-compressed pprof;
 *   - otlp: OpenTelemetry's ExportProfilesServiceRequest (profiles/v1development): the labels
 *     as resource attributes (service.name for the application), the thread of each sample
 *     as its attribute thread.name, frames as Function/Location/Stack entries of the
 *     request's dictionary. */
#ifndef PA_WIRE_H
#define PA_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../profile/profile.h"

struct pa_wire_label {
    const char *name, *value;
};

/* The profile type's name Pyroscope files a mode under: process_cpu, wall, gil. */
const char *pa_wire_type_name(const char *mode);

/* A PushRequest of one series (labels: __name__, service_name and pyroscope_spy=pyagent
 * first, then labels[]) with
 * p as gzip'd pprof; id names the profile (RawSample.ID). 0, or -1 with err. */
int pa_wire_push(const pa_profile *p, const char *service, const struct pa_wire_label *labels,
                 size_t nlabels, const char *id, pa_buf *out, pa_error *err);

/* An ExportProfilesServiceRequest of p, the samples of [from, until); profile_id (16 bytes,
 * or NULL for none) names the profile (Profile.profile_id). 0, or -1 with err. */
int pa_wire_otlp(const pa_profile *p, const char *service, const struct pa_wire_label *labels,
                 size_t nlabels, time_t from, time_t until, const uint8_t *profile_id, pa_buf *out,
                 pa_error *err);

/* An OTLP answer's partial_success: how many profiles the server rejected (0 for none, or an
 * answer that is not an ExportProfilesServiceResponse), with its message in err. */
int64_t pa_wire_otlp_rejected(const void *body, size_t len, pa_error *err);

/* What libpyagent-wire.so exports: one table, named by its version, so that an agent never
 * calls a wire library built from other sources (the name would be missing). */
#define PA_WIRE_API "pa_wire_api_1"
#define PA_WIRE_FILE "libpyagent-wire.so"
struct pa_wire_api {
    int (*push)(const pa_profile *p, const char *service, const struct pa_wire_label *labels,
                size_t nlabels, const char *id, pa_buf *out, pa_error *err);
    int (*otlp)(const pa_profile *p, const char *service, const struct pa_wire_label *labels,
                size_t nlabels, time_t from, time_t until, const uint8_t *profile_id, pa_buf *out,
                pa_error *err);
    int64_t (*otlp_rejected)(const void *body, size_t len, pa_error *err);
};

#endif
