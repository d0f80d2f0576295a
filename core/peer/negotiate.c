/* core/peer/negotiate.c: transport negotiation (docs/architecture.md), a pure
 * function: the first transport in OUR preference order that loaded here
 * and that the peer also speaks.  An RDMA host and an EFA host share no
 * RDMA fabric, so they meet on TCP when both list it. */
#include "peer/negotiate.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"

/* "[a, b, c]" into out (truncated to fit). */
static void list_text(char *out, size_t outlen, const char *const *names, size_t n,
                      const int *loaded)
{
    size_t used = (size_t)snprintf(out, outlen, "[");
    int first = 1;
    for (size_t i = 0; i < n && used < outlen; i++) {
        if (loaded && !loaded[i])
            continue;
        used += (size_t)snprintf(out + used, outlen - used, "%s%s", first ? "" : ", ",
                                 names[i] ? names[i] : "?");
        first = 0;
    }
    if (used < outlen)
        snprintf(out + used, outlen - used, "]");
}

int tern_negotiate(const char *const *local, size_t nlocal, const int *loaded,
                   const char *const *peer, size_t npeer, const char *peer_name,
                   char *err, size_t errlen)
{
    for (size_t i = 0; i < nlocal; i++) {
        if ((loaded && !loaded[i]) || !local[i])
            continue;
        for (size_t j = 0; j < npeer; j++)
            if (peer[j] && strcmp(local[i], peer[j]) == 0)
                return (int)i;
    }
    char l[512], p[512];
    list_text(l, sizeof l, local, nlocal, loaded);
    list_text(p, sizeof p, peer, npeer, NULL);
    return tern_errf(err, errlen, TERN_ERR_NO_TRANSPORT,
                     "no common transport with %s: local %s, peer %s",
                     peer_name ? peer_name : "peer", l, p);
}
