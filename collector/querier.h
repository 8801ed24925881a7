/* querier.h: Grafana Pyroscope's query API, querier.v1.QuerierService over Connect (binary
 * protobuf or JSON), so that Grafana's Pyroscope data source and Profiles Drilldown can use
 * the collector: ProfileTypes, LabelNames, LabelValues, Series, SelectSeries,
 * SelectMergeStacktraces, SelectMergeProfile and Diff. Every profile comes from the store
 * through the collector's own query functions (query.h: pa_coll_query_profile, and the
 * store's series list and timeline); querier.c only maps Pyroscope's model onto them. */
#ifndef PA_COLL_QUERIER_H
#define PA_COLL_QUERIER_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"
#include "store.h"

/* method: what follows "/querier.v1.QuerierService/". A 404 Connect error for an unknown one. */
void pa_coll_handle_querier(struct pa_coll_store *st, const char *method, const char *content_type,
                            const uint8_t *body, size_t len, int64_t now,
                            struct pa_coll_response *r);

#endif
