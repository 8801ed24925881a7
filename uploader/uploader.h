/* uploader.h: turns the sampler's tables into profiles and writes them out.
 *
 * Normal context, on the agent thread (and once more at exit). Draining swaps the sampler's
 * tables, so the handler never waits and no sample is lost, resolves frame ids to names, and
 * adds the stacks to the process's running profile, which is written to the local folded
 * file atomically (temporary file, then rename). */
#ifndef PA_UPLOADER_H
#define PA_UPLOADER_H

#include "../agent/pyversions.h"
#include "../base/config.h"

/* cfg must live as long as the process (it is referred to, not copied). */
int pa_uploader_init(const struct pa_config *cfg, const struct pa_python *py);
/* Was anything sampled in this process (drained or not)? */
int pa_uploader_has_samples(void);
/* Agent thread, while the interpreter runs (PYAGENT_OPCODES): finds the column spans of the
 * instructions in the frames stored since the last call (pa_code_columns), so that a code
 * object freed before the drain keeps its spans; the final drain runs after finalization,
 * when every code object may be gone. Under the same lock as the drain. */
void pa_uploader_find_columns(void);
/* Moves every sample counted so far into the profiles. final: the last drain of this process
 * (the table is left as it is). */
void pa_uploader_drain(int final);
/* Hands what was drained since the last call to the local profile and, with a server, to the
 * spool (local disk only). */
void pa_uploader_spool(void);
/* With a server, sends the spool until deadline (monotonic seconds; 0 = the configured
 * time-outs only). Network I/O: the caller holds no lock. final: the last upload of this
 * process (ignores back-off, ends at the deadline; nothing from a process that never spooled a
 * profile of its own). */
void pa_uploader_send(double deadline, int final);
/* Writes the local file (if one is configured). final: the last write of this process. */
int pa_uploader_write_local(int final);
/* After the final upload: writes the local file again if the uploads' counters in its header
 * (rejected, rejected_dropped, spool_dropped) changed since it was written. */
int pa_uploader_rewrite_local(void);
/* The child of a fork starts with empty profiles and its own file name. */
void pa_uploader_fork_child(void);
/* The local file path of this process ("" if none). */
const char *pa_uploader_output_path(void);

#endif
