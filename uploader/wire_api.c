/* wire_api.c: the one symbol libpyagent-wire.so exports (wire.h, PA_WIRE_API). */
#include "wire.h"

__attribute__((visibility("default"))) const struct pa_wire_api pa_wire_api_1 = {
    .push = pa_wire_push,
    .otlp = pa_wire_otlp,
    .otlp_rejected = pa_wire_otlp_rejected,
};
