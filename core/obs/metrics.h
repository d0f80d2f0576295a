/* core/obs/metrics.h: the Prometheus endpoint (config `metrics_listen`): the
 * engine's counter sets (stats.h) in the text exposition format, version
 * 0.0.4 (metrics_text.h), served at /metrics by one thread (metrics.c).
 * Names and labels: docs/metrics.md. */
#ifndef TERN_CORE_METRICS_H
#define TERN_CORE_METRICS_H

#include <stddef.h>

#include "obs/stats.h"

typedef struct tern_metrics tern_metrics;

/* Listen on listen ("host:port", port 0: a free one) and serve until
 * tern_metrics_stop.  engine_name must outlive the server. */
int tern_metrics_start(const char *listen, tern_stats_obj *s, const char *engine_name,
                       tern_metrics **out, char *err, size_t errlen);
/* "host:port" actually listening. */
const char *tern_metrics_address(const tern_metrics *m);
void tern_metrics_stop(tern_metrics *m);

#endif
