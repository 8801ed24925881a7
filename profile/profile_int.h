/* profile_int.h - helpers shared by the files of the profile library, not part of its API. */
#ifndef PA_PROFILE_INT_H
#define PA_PROFILE_INT_H

#include "profile.h"

#include <assert.h>
#include <stdio.h>

void *pa_xrealloc(void *p, size_t n); /* aborts on out-of-memory */
char *pa_xstrndup(const char *s, size_t n);
uint64_t pa_hash_bytes(const void *data, size_t n);

/* The text dialects' line parser, used by parse.c and the fuzz targets. */
int pa_parse_text_line(pa_profile *p, const char *line, size_t len, pa_format *format);

#endif
