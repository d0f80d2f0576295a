#define _GNU_SOURCE /* engine.h needs pthread_rwlock_t */
/* The engine: lifecycle, memory registration, segments opened by name over
 * p2p metadata (Metadata frames through the real daemon), descriptors,
 * notifications and the daemon's handler.  Two engines in one process over
 * the memcpy transport, on loopback with ephemeral ports. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "control/handshake.h"
#include "tern/tern.h"

static const char *yaml_memcpy = "server_name: 127.0.0.1:0\n"
                                 "metadata: p2p\n"
                                 "transports:\n"
                                 "  - name: memcpy\n"
                                 "log_level: warn\n";

static tern_engine *mk(void)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml_memcpy, "test", err, sizeof err);
    cr_assert_not_null(e, "engine: %s", err);
    return e;
}

Test(engine, create_resolves_port_and_destroy)
{
    tern_engine *e = mk();
    const char *name = tern_engine_server_name(e);
    cr_assert(strncmp(name, "127.0.0.1:", 10) == 0, "%s", name);
    cr_assert_neq(atoi(name + 10), 0, "port 0 must be resolved: %s", name);
    cr_assert_str_eq(tern_engine_last_error(e), "");
    tern_engine_destroy(e);
}

Test(engine, bad_config_fails_with_message)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml("transports: 5\n", "bad", err, sizeof err);
    cr_assert_null(e);
    cr_assert_neq(err[0], '\0');
}

Test(engine, unknown_transport_fails_cleanly)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml("server_name: 127.0.0.1:0\n"
                                                  "transports:\n  - name: nosuchxport\n",
                                                  "bad", err, sizeof err);
    cr_assert_null(e);
    cr_assert(strstr(err, "nosuchxport"), "%s", err);
}

Test(engine, register_unregister_overlap)
{
    tern_engine *e = mk();
    char *buf = malloc(1 << 20);
    cr_assert_eq(tern_register_memory(e, buf, 4096, NULL), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_register_memory(e, buf + 4096, 4096, "cpu:0"), 0, "adjacent is fine");
    cr_assert_eq(tern_register_memory(e, buf + 100, 10, NULL), TERN_ERR_EXISTS);
    const char *msg = tern_engine_last_error(e);
    char a[64], b[64];
    snprintf(a, sizeof a, "0x%llx", (unsigned long long)(uintptr_t)(buf + 100));
    snprintf(b, sizeof b, "0x%llx", (unsigned long long)(uintptr_t)buf);
    cr_assert(strstr(msg, a) && strstr(msg, b), "both ranges named: %s", msg);
    cr_assert_eq(tern_register_memory(e, buf + 4000, 200, NULL), TERN_ERR_EXISTS);
    cr_assert_eq(tern_register_memory(e, buf + 8000, 8192, NULL), TERN_ERR_EXISTS);
    cr_assert_eq(tern_register_memory(e, buf, 0, NULL), TERN_ERR_INVAL);
    cr_assert_eq(tern_register_memory(e, NULL, 10, NULL), TERN_ERR_INVAL);
    cr_assert_eq(tern_unregister_memory(e, buf + 1), TERN_ERR_NOT_FOUND);
    cr_assert_eq(tern_unregister_memory(e, buf), 0);
    cr_assert_eq(tern_register_memory(e, buf + 100, 10, NULL), 0, "free again after unregister");
    cr_assert_eq(tern_unregister_memory(e, buf + 100), 0);
    cr_assert_eq(tern_unregister_memory(e, buf + 4096), 0);
    tern_engine_destroy(e);
    free(buf);
}

Test(engine, local_descriptor_lists_buffers)
{
    tern_engine *e = mk();
    char *buf = malloc(65536), *json = NULL;
    cr_assert_eq(tern_register_memory(e, buf, 65536, "cpu:0"), 0);
    cr_assert_eq(tern_segment_descriptor(e, TERN_LOCAL_SEGMENT, &json), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "\"addr\":%llu", (unsigned long long)(uintptr_t)buf);
    cr_assert(strstr(json, addr), "%s", json);
    cr_assert(strstr(json, "\"name\":\"cpu:0\""), "%s", json);
    cr_assert(strstr(json, tern_engine_server_name(e)), "%s", json);
    cr_assert(strstr(json, "\"protocol\":\"memcpy\""), "%s", json);
    free(json);
    cr_assert_eq(tern_unregister_memory(e, buf), 0);
    cr_assert_eq(tern_segment_descriptor(e, TERN_LOCAL_SEGMENT, &json), 0);
    cr_assert_null(strstr(json, addr), "unregistered buffer gone: %s", json);
    free(json);
    tern_engine_destroy(e);
    free(buf);
}

Test(engine, segment_open_by_name_over_p2p)
{
    tern_engine *a = mk(), *b = mk();
    char *buf = malloc(8192);
    cr_assert_eq(tern_register_memory(b, buf, 8192, NULL), 0);
    tern_segment_id id = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(id, 0, "%s", tern_engine_last_error(a));
    cr_assert_eq(tern_segment_open(a, tern_engine_server_name(b)), id, "id reused");
    char t[32];
    cr_assert_eq(tern_segment_transport(a, id, t, sizeof t), 0);
    cr_assert_str_eq(t, "memcpy");
    char *json = NULL, addr[64];
    cr_assert_eq(tern_segment_descriptor(a, id, &json), 0);
    snprintf(addr, sizeof addr, "\"addr\":%llu", (unsigned long long)(uintptr_t)buf);
    cr_assert(strstr(json, addr), "%s", json);
    free(json);
    tern_segment_id self = tern_segment_open(a, tern_engine_server_name(a));
    cr_assert_geq(self, 0, "loopback open: %s", tern_engine_last_error(a));
    cr_assert_neq(self, id);
    cr_assert_eq(tern_segment_close(a, id), 0);
    cr_assert_eq(tern_segment_close(a, id), TERN_ERR_NOT_FOUND);
    cr_assert_eq(tern_segment_transport(a, id, t, sizeof t), TERN_ERR_NOT_FOUND);
    cr_assert_geq(tern_segment_open(a, tern_engine_server_name(b)), 0, "reopen");
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    free(buf);
}

Test(engine, segment_open_unreachable_fails_with_message)
{
    tern_engine *a = mk();
    tern_segment_id id = tern_segment_open(a, "127.0.0.1:1");
    cr_assert_lt(id, 0);
    cr_assert(strstr(tern_engine_last_error(a), "127.0.0.1:1"), "%s",
              tern_engine_last_error(a));
    cr_assert_eq(tern_segment_open(a, ""), TERN_ERR_INVAL);
    cr_assert_eq(tern_segment_open(a, NULL), TERN_ERR_INVAL);
    tern_engine_destroy(a);
}

Test(engine, destroy_unpublishes_segment)
{
    tern_engine *a = mk(), *b = mk();
    char name[300];
    snprintf(name, sizeof name, "%s", tern_engine_server_name(b));
    tern_engine_destroy(b);
    cr_assert_lt(tern_segment_open(a, name), 0, "gone after destroy");
    tern_engine_destroy(a);
}

Test(engine, notify_round_trip)
{
    tern_engine *a = mk(), *b = mk();
    tern_segment_id id = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(id, 0, "%s", tern_engine_last_error(a));
    char from[300], name[64], msg[TERN_NOTIFY_MAX + 1];
    cr_assert_eq(tern_notify_recv(b, from, sizeof from, name, sizeof name, msg, sizeof msg), 0);
    cr_assert_eq(tern_notify_send(a, id, "kv-ready", "layer 7 done"), 0, "%s",
                 tern_engine_last_error(a));
    cr_assert_eq(tern_notify_send(a, id, "second", ""), 0);
    cr_assert_eq(tern_notify_recv(b, from, sizeof from, name, sizeof name, msg, sizeof msg), 1);
    cr_assert_str_eq(from, tern_engine_server_name(a));
    cr_assert_str_eq(name, "kv-ready");
    cr_assert_str_eq(msg, "layer 7 done");
    cr_assert_eq(tern_notify_recv(b, from, sizeof from, name, sizeof name, msg, sizeof msg), 1);
    cr_assert_str_eq(name, "second");
    cr_assert_eq(tern_notify_recv(b, from, sizeof from, name, sizeof name, msg, sizeof msg), 0);
    char big[TERN_NOTIFY_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(tern_notify_send(a, id, "big", big), TERN_ERR_INVAL);
    cr_assert_eq(tern_notify_send(a, 999, "x", "y"), TERN_ERR_NOT_FOUND);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
}

Test(engine, notify_queue_full_refuses_never_drops)
{
    tern_engine *a = mk(), *b = mk();
    tern_segment_id id = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(id, 0);
    char n[32];
    for (int i = 0; i < TERN_NOTIFY_QUEUE; i++) {
        snprintf(n, sizeof n, "n%d", i);
        cr_assert_eq(tern_notify_send(a, id, n, "m"), 0);
    }
    for (int i = 0; i < 5; i++) /* full: the sender hears it */
        cr_assert_eq(tern_notify_send(a, id, "over", "m"), TERN_ERR_BUSY);
    cr_assert(strstr(tern_engine_last_error(a), "queue full"), "%s", tern_engine_last_error(a));
    cr_assert_eq(tern_notes_dropped(b->notes), 5);
    tern_notify_stats st;
    cr_assert_eq(tern_notify_stats_get(b, &st), 0);
    cr_assert_eq(st.refused, 5);
    cr_assert_eq(st.queued, TERN_NOTIFY_QUEUE);
    cr_assert_eq(tern_notify_stats_get(a, &st), 0);
    cr_assert_eq(st.sent, TERN_NOTIFY_QUEUE);
    cr_assert_eq(st.send_failed, 5);
    char name[32];
    cr_assert_eq(tern_notify_recv(b, NULL, 0, name, sizeof name, NULL, 0), 1);
    cr_assert_str_eq(name, "n0", "the oldest is kept");
    cr_assert_eq(tern_notify_send(a, id, "again", "m"), 0, "room again after one read");
    cr_assert_eq(tern_notes_connects(a->notes), 1, "every send reused one kept connection");
    tern_engine_destroy(a);
    tern_engine_destroy(b);
}

Test(engine, notify_connection_closed_while_idle_is_reopened)
{
    char err[1024] = "";
    const char *y = "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: memcpy\n"
                    "io_timeout_ms: 200\nlog_level: warn\n";
    tern_engine *a = tern_engine_create_from_yaml(y, "t", err, sizeof err);
    tern_engine *b = tern_engine_create_from_yaml(y, "t", err, sizeof err);
    cr_assert(a && b, "%s", err);
    tern_segment_id id = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_eq(tern_notify_send(a, id, "one", "m"), 0);
    cr_assert_eq(tern_notify_send(a, id, "two", "m"), 0);
    cr_assert_eq(tern_notes_connects(a->notes), 1);
    usleep(1200 * 1000); /* the daemon closes the idle kept connection */
    cr_assert_eq(tern_notify_send(a, id, "three", "m"), 0, "%s", tern_engine_last_error(a));
    cr_assert_eq(tern_notes_connects(a->notes), 2);
    char name[16];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tern_notify_recv(b, NULL, 0, name, sizeof name, NULL, 0), 1);
    cr_assert_str_eq(name, "three");
    cr_assert_eq(tern_notify_recv(b, NULL, 0, name, sizeof name, NULL, 0), 0, "no duplicate");
    tern_engine_destroy(a);
    tern_engine_destroy(b);
}

static void *fail_in_thread(void *arg)
{
    tern_engine *e = arg;
    cr_assert_eq(tern_unregister_memory(e, (void *)0x1234), TERN_ERR_NOT_FOUND);
    cr_assert_neq(tern_engine_last_error(e)[0], '\0');
    return NULL;
}

Test(engine, last_error_is_per_thread)
{
    tern_engine *e = mk();
    pthread_t t;
    pthread_create(&t, NULL, fail_in_thread, e);
    pthread_join(t, NULL);
    cr_assert_str_eq(tern_engine_last_error(e), "", "another thread's failure");
    cr_assert_eq(tern_unregister_memory(e, (void *)0x1234), TERN_ERR_NOT_FOUND);
    cr_assert(strstr(tern_engine_last_error(e), "0x1234"), "%s", tern_engine_last_error(e));
    tern_engine *f = mk();
    cr_assert_str_eq(tern_engine_last_error(f), "", "per engine");
    tern_engine_destroy(f);
    tern_engine_destroy(e);
}

/* Send one frame to an engine's daemon; returns the reply (malloc()ed). */
static char *ask(tern_engine *e, int type, const char *json)
{
    char *reply = NULL, err[512] = "";
    size_t rlen = 0;
    int rc = tern_hs_request(tern_engine_server_name(e), type, json, strlen(json), &reply,
                             &rlen, 1 << 20, 2000, 2000, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    return reply;
}

Test(engine, daemon_answers_probe_and_metadata)
{
    tern_engine *e = mk();
    char *r = ask(e, TERN_HS_PROBE, "{}");
    cr_assert(strstr(r, "\"ok\":true") && strstr(r, tern_engine_server_name(e)), "%s", r);
    free(r);
    r = ask(e, TERN_HS_METADATA, "{}");
    cr_assert(strstr(r, "\"transports\"") && strstr(r, tern_engine_server_name(e)), "%s", r);
    free(r);
    tern_engine_destroy(e);
}

Test(engine, connection_for_unloaded_transport_is_refused)
{
    tern_engine *e = mk();
    char *r = ask(e, TERN_HS_CONNECTION,
                  "{\"transport\":\"rdma\",\"local_nic_path\":\"10.0.0.7:12001@mlx5_0\","
                  "\"peer_nic_path\":\"x@mem0\",\"qp_num\":[1],\"reply_msg\":\"\"}");
    cr_assert(strstr(r, "reply_msg") && strstr(r, "'rdma' is not loaded"), "%s", r);
    free(r);
    r = ask(e, TERN_HS_CONNECTION,
            "{\"transport\":\"memcpy\",\"local_nic_path\":\"p@d\",\"peer_nic_path\":\"x@mem0\"}");
    cr_assert(strstr(r, "takes no handshake"), "%s", r);
    free(r);
    r = ask(e, TERN_HS_CONNECTION, "{\"local_lid\": 70000}");
    cr_assert(strstr(r, "bad handshake descriptor") && strstr(r, "local"), "%s", r);
    free(r);
    r = ask(e, TERN_HS_NOTIFY, "{\"name\": 5}");
    cr_assert(strstr(r, "reply_msg"), "%s", r);
    free(r);
    tern_engine_destroy(e);
}

Test(engine, null_arguments_do_not_crash)
{
    tern_engine_destroy(NULL);
    cr_assert_str_eq(tern_engine_last_error(NULL), "");
    cr_assert_eq(tern_register_memory(NULL, (void *)1, 1, NULL), TERN_ERR_INVAL);
    cr_assert_eq(tern_segment_open(NULL, "x"), TERN_ERR_INVAL);
    cr_assert_eq(tern_notify_recv(NULL, NULL, 0, NULL, 0, NULL, 0), TERN_ERR_INVAL);
    tern_engine *e = mk();
    cr_assert_eq(tern_segment_descriptor(e, 5, NULL), TERN_ERR_INVAL);
    char *j = NULL;
    cr_assert_eq(tern_segment_descriptor(e, 5, &j), TERN_ERR_NOT_FOUND);
    cr_assert_eq(tern_segment_descriptor(e, -7, &j), TERN_ERR_NOT_FOUND);
    cr_assert_eq(tern_segment_close(e, 12345678), TERN_ERR_NOT_FOUND);
    tern_engine_destroy(e);
}

Test(engine, create_from_file)
{
    char path[] = "/tmp/tern-engine-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, yaml_memcpy, strlen(yaml_memcpy)), (ssize_t)strlen(yaml_memcpy));
    close(fd);
    char err[1024] = "";
    tern_engine *e = tern_engine_create(path, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    char *json = NULL;
    cr_assert_eq(tern_segment_descriptor(e, TERN_LOCAL_SEGMENT, &json), 0);
    cr_assert(strstr(json, "\"protocol\":\"memcpy\""), "%s", json);
    free(json);
    tern_engine_destroy(e);
    unlink(path);
    cr_assert_null(tern_engine_create("/nonexistent/tern.yaml", err, sizeof err));
    cr_assert(strstr(err, "/nonexistent/tern.yaml"), "%s", err);
}
