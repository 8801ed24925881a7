/* tls.c: the agent's thread-local block (tls.h). Compiled into the stub libpyagent.so, which
 * exports it, and into pabase for executables that link the agent's objects themselves; the
 * agent library, linked against the stub, takes the stub's. */
#include "tls.h"

__attribute__((visibility("default"))) __thread struct pa_tls pa_tls
    __attribute__((tls_model("initial-exec")));
