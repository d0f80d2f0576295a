#define _GNU_SOURCE /* engine.h needs pthread_rwlock_t */
/* Transport negotiation (docs/topology.md, Transport negotiation): the first transport in the
 * local preference order that loaded here and that the peer speaks. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine.h"

static int nego(const char *const *l, size_t nl, const int *loaded, const char *const *p,
                size_t np, char *err)
{
    return tern_negotiate(l, nl, loaded, p, np, "10.0.0.7:12001", err, 512);
}

Test(negotiate, rdma_tcp_vs_efa_tcp_uses_tcp)
{
    const char *l[] = {"rdma", "tcp"}, *p[] = {"efa", "tcp"};
    char err[512] = "";
    cr_assert_eq(nego(l, 2, NULL, p, 2, err), 1, "%s", err);
}

Test(negotiate, efa_tcp_vs_efa_tcp_uses_efa)
{
    const char *l[] = {"efa", "tcp"}, *p[] = {"efa", "tcp"};
    char err[512] = "";
    cr_assert_eq(nego(l, 2, NULL, p, 2, err), 0, "%s", err);
}

Test(negotiate, rdma_vs_efa_fails_naming_both_lists)
{
    const char *l[] = {"rdma"}, *p[] = {"efa"};
    char err[512] = "";
    cr_assert_eq(nego(l, 1, NULL, p, 1, err), TERN_ERR_NO_TRANSPORT);
    cr_assert_str_eq(err, "no common transport with 10.0.0.7:12001: local [rdma], peer [efa]");
}

Test(negotiate, unloaded_local_transport_is_skipped)
{
    const char *l[] = {"rdma", "tcp"}, *p[] = {"rdma", "tcp"};
    const int loaded[] = {0, 1};
    char err[512] = "";
    cr_assert_eq(nego(l, 2, loaded, p, 2, err), 1, "%s", err);
}

Test(negotiate, peer_order_does_not_matter_ours_does)
{
    const char *l[] = {"tcp", "efa"}, *p[] = {"efa", "tcp"};
    char err[512] = "";
    cr_assert_eq(nego(l, 2, NULL, p, 2, err), 0, "%s", err);
}

Test(negotiate, empty_peer_list_fails)
{
    const char *l[] = {"tcp"};
    char err[512] = "";
    cr_assert_eq(nego(l, 1, NULL, NULL, 0, err), TERN_ERR_NO_TRANSPORT);
    cr_assert(strstr(err, "peer []"), "%s", err);
}

Test(negotiate, nothing_loaded_here_fails)
{
    const char *l[] = {"rdma"}, *p[] = {"rdma"};
    const int loaded[] = {0};
    char err[512] = "";
    cr_assert_eq(nego(l, 1, loaded, p, 1, err), TERN_ERR_NO_TRANSPORT);
    cr_assert(strstr(err, "local []") && strstr(err, "peer [rdma]"), "%s", err);
}
