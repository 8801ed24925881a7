/* units.h: the numbers people type at the collector — timestamps (Pyroscope's digit-count rule
 * and "now-1h"), durations ("7d") and byte sizes ("16M"). Pure functions, no state. */
#ifndef PA_COLL_UNITS_H
#define PA_COLL_UNITS_H

#include <stdint.h>

/* An ingest timestamp as Pyroscope reads it: an integer whose digit count tells the unit
 * (13 digits: ms, 16: µs, 19: ns, anything else: seconds). "" and "now" mean now.
 * round_up chooses the ceiling for sub-second inputs (used for `until`). -1 if malformed. */
int pa_coll_parse_timestamp(const char *s, int64_t now, int round_up, int64_t *out);

/* A query time: a timestamp as above, or "now", "now-1h", "now-90m", "now+5s" ("now 5s" too:
 * what "now+5s" becomes when typed unencoded in a URL). With round_up
 * (an exclusive `until`), "now..." is one second later, so that the current second counts. */
int pa_coll_parse_query_time(const char *s, int64_t now, int round_up, int64_t *out);

/* A duration in seconds: "45", "45s", "30m", "12h", "7d", "2w", or sums such as "1h30m".
 * -1 if malformed or absurdly large. */
int pa_coll_parse_duration(const char *s, int64_t *out);

/* A byte count: "1048576", "512K", "16M", "1G" (binary multiples). -1 if malformed. */
int pa_coll_parse_size(const char *s, uint64_t *out);

#endif
