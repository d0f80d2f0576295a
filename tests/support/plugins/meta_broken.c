/* tests/support/plugins/meta_broken.c: metadata-store plugins that are broken
 * on purpose, one way each (chosen by compile definitions), so the core's
 * checks are proven before any plugin code runs; and one ABI 1.0 store
 * (struct_size without put_ttl, v10) whose put_ttl must never be reached.
 * Built by tests/support/CMakeLists.txt as libtern-meta-<scheme>.so. */
#include <stddef.h>
#include <stdio.h>

#include "tern/metastore.h"

#ifndef MAGIC
#define MAGIC TERN_METASTORE_MAGIC
#endif
#ifndef ABI_MAJOR
#define ABI_MAJOR TERN_METASTORE_ABI_MAJOR
#endif
#ifndef STRUCT_SIZE
#define STRUCT_SIZE sizeof(tern_metastore)
#endif
#ifndef SCHEME_FIELD
#define SCHEME_FIELD SCHEME
#endif

__attribute__((unused)) static int b_open(const char *uri, int timeout_ms, void **store, char *err, size_t errlen)
{
    (void)timeout_ms;
#ifdef OPEN_OK
    (void)uri, (void)err, (void)errlen;
    *store = NULL;
    return 0;
#else
    (void)store;
    snprintf(err, errlen, "test plugin refuses %s: store unreachable", uri);
    return TERN_ERR_CONNECT;
#endif
}
__attribute__((unused)) static void b_close(void *store) { (void)store; }
__attribute__((unused)) static int b_get(void *s, const char *k, char **v, size_t *l, char *e, size_t el)
{
    (void)s, (void)k, (void)v, (void)l, (void)e, (void)el;
    return TERN_ERR_NOT_FOUND;
}
__attribute__((unused)) static int b_put(void *s, const char *k, const char *v, size_t l, char *e, size_t el)
{
    (void)s, (void)k, (void)v, (void)l, (void)e, (void)el;
    return 0;
}
__attribute__((unused)) static int b_del(void *s, const char *k, char *e, size_t el)
{
    (void)s, (void)k, (void)e, (void)el;
    return 0;
}
__attribute__((unused)) static int b_list(void *s, const char *p, tern_metastore_list_cb cb, void *a, char *e,
                  size_t el)
{
    (void)s, (void)p, (void)cb, (void)a, (void)e, (void)el;
    return 0;
}

/* Lies beyond STRUCT_SIZE in the v10 variant: the core must not call it. */
__attribute__((unused)) static int b_put_ttl(void *s, const char *k, const char *v, size_t l, int ttl,
                                             char *e, size_t el)
{
    (void)s, (void)k, (void)v, (void)l, (void)ttl;
    snprintf(e, el, "put_ttl lies past struct_size and must not be called");
    return TERN_ERR_IO;
}

#ifdef NO_SYMBOL
__attribute__((visibility("default"))) int tern_metastore_v0 = 1;
#else
__attribute__((visibility("default"))) const tern_metastore tern_metastore_v1 = {
    .magic = MAGIC,
    .struct_size = STRUCT_SIZE,
    .abi_major = ABI_MAJOR,
    .abi_minor = 0,
    .scheme = SCHEME_FIELD,
    .version = "test",
    .open = b_open,
    .close = b_close,
    .get = b_get,
    .put = b_put,
    .del = b_del,
#ifndef NULL_LIST
    .list = b_list,
#endif
#ifdef WITH_PUT_TTL
    .put_ttl = b_put_ttl,
#endif
};
#endif
