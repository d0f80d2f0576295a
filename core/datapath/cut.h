/* core/datapath/cut.h: validation and the cut of a request into slices.
 *
 * Cut: slices of the transport's slice size; a remainder up to slice +
 * 16 KiB stays one slice (tail rule); a slice never crosses a buffer
 * boundary on either side (local buffers from our registrations, remote
 * ones from the peer's descriptor), so a request may span adjacent
 * registered buffers. */
#ifndef TERN_CORE_DATAPATH_CUT_H
#define TERN_CORE_DATAPATH_CUT_H

#include "datapath/request.h"

#define TERN_TAIL_SLACK (16u * 1024u) /* a tail up to slice + 16 KiB stays one slice */
#define TERN_CUT_REFETCH 1            /* validate: the cached descriptor does not
                                         cover the remote range (refetch first) */

/* Length of the next slice for `remaining` bytes (the tail rule). */
uint64_t tern_slice_next(uint64_t remaining, uint64_t slice_size);

/* Checks what needs no peer: opcode, lengths, overflow, an open segment,
 * registered local memory; then the remote range against the cached
 * descriptor.  0: ready to cut; TERN_CUT_REFETCH: the remote range is not
 * covered by what we have; else an error with the reason in msg. */
int tern_cut_validate(tern_engine *e, const tern_request *r, tern_segment **seg, char *msg,
                      size_t msglen);
/* The remote range against the current descriptor: 0 or TERN_ERR_RANGE
 * with the reason in msg (after a refetch: nothing more to try). */
int tern_cut_check_remote(tern_segment *seg, const tern_request *r, char *msg, size_t msglen);

/* A list of slices under construction. */
typedef struct tern_cut_list {
    tern_cslice **v;
    size_t n, cap;
} tern_cut_list;

int tern_cut_list_add(tern_cut_list *l, tern_cslice *cs);
/* Appends request idx's slices to l; returns their count or an error
 * (nothing appended then).  The request's live count is not touched. */
int tern_cut(tern_batch *b, size_t idx, tern_segment *seg, tern_cut_list *l);
/* One slice covering the whole request, for the worker to cut later. */
tern_cslice *tern_cut_whole(tern_batch *b, size_t idx, tern_segment *seg);

#endif
