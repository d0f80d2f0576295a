/* core/datapath/batch.h: test hooks of the batch API (the API itself is in
 * tern/tern.h). */
#ifndef TERN_CORE_DATAPATH_BATCH_H
#define TERN_CORE_DATAPATH_BATCH_H

#include <stddef.h>

#include "tern/tern.h"

/* Slices a request was cut into (first cut), or a negative code. */
int tern_batch_slice_count(tern_batch *b, size_t index);

#endif
