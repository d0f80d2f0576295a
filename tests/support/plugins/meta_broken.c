/* tests/support/plugins/meta_broken.c: metadata-store plugins that are broken
 * on purpose, one way each (chosen by compile definitions), so the core's
 * checks are proven before any plugin code runs.  Built by tests/support/CMakeLists.txt
 * as libtern-meta-<scheme>.so. */
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
    (void)store;
    snprintf(err, errlen, "test plugin refuses %s: store unreachable", uri);
    return TERN_ERR_CONNECT;
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
};
#endif
