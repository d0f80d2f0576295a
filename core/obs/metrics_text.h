/* core/obs/metrics_text.h: the engine's counter sets (stats.h) as the
 * Prometheus text exposition format, version 0.0.4 (metrics_text.c); what
 * the endpoint (metrics.h) serves.  Names and labels: docs/metrics.md. */
#ifndef TERN_CORE_METRICS_TEXT_H
#define TERN_CORE_METRICS_TEXT_H

#include <stddef.h>

#include "obs/stats.h"

/* The exposition text of s (malloc()ed, NUL-terminated, length in *len),
 * or NULL on no memory. */
char *tern_metrics_render(tern_stats_obj *s, const char *engine_name, size_t *len);

#endif
