/* core/plugin/plugin_load.c: finding, opening and checking a plugin of any kind
 * (see plugin_load.h and docs/plugins.md, "How tern loads a plugin").
 *
 * The loader never runs plugin code: everything checked here is data in
 * the exported table (magic, ABI major, struct size, name, mandatory
 * operations).  What runs the plugin (a transport's init, a store's open)
 * is its caller's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plugin/plugin_load.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/values.h"
#include "base/fileio.h"
#include "tern/transport.h"
#include "base/util.h"

void tern_plugin_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ---- outcomes ------------------------------------------------------------------ */

static const struct {
    const char *name, *key;
    int err;
} outcomes[] = {
    [TERN_LOAD_OK] = {"loaded", "loaded", 0},
    [TERN_LOAD_NOT_FOUND] = {"not found", "not_found", TERN_ERR_PLUGIN},
    [TERN_LOAD_DLOPEN] = {"dlopen failed", "dlopen_failed", TERN_ERR_PLUGIN},
    [TERN_LOAD_NO_SYMBOL] = {"missing symbol", "missing_symbol", TERN_ERR_PLUGIN},
    [TERN_LOAD_BAD_MAGIC] = {"wrong magic", "wrong_magic", TERN_ERR_ABI},
    [TERN_LOAD_ABI_MISMATCH] = {"ABI mismatch", "abi_mismatch", TERN_ERR_ABI},
    [TERN_LOAD_TOO_SMALL] = {"struct too small", "struct_too_small", TERN_ERR_ABI},
    [TERN_LOAD_MISSING_OP] = {"missing operation", "missing_operation", TERN_ERR_ABI},
    [TERN_LOAD_NAME_MISMATCH] = {"name mismatch", "name_mismatch", TERN_ERR_ABI},
    [TERN_LOAD_BAD_OPTION] = {"bad option", "bad_option", TERN_ERR_CONFIG},
    [TERN_LOAD_INIT_FAILED] = {"init failed", "init_failed", TERN_ERR_PLUGIN},
    [TERN_LOAD_NO_DEVICE] = {"no device", "no_device", TERN_ERR_PLUGIN},
    [TERN_LOAD_NOT_TRIED] = {"not tried", "not_tried", TERN_ERR_PLUGIN},
};

#define N_OUTCOMES (sizeof(outcomes) / sizeof(outcomes[0]))

const char *tern_load_outcome_name(tern_load_outcome o)
{
    return (unsigned)o < N_OUTCOMES ? outcomes[o].name : "unknown";
}

const char *tern_load_outcome_key(tern_load_outcome o)
{
    return (unsigned)o < N_OUTCOMES ? outcomes[o].key : "unknown";
}

int tern_load_outcome_err(tern_load_outcome o)
{
    return (unsigned)o < N_OUTCOMES ? outcomes[o].err : TERN_ERR_PLUGIN;
}

/* ---- the default directory ---------------------------------------------------------- */

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* The file holding this code: libtern.so, or the program when the core is
 * linked statically (tools, tests).  dladdr's name for the main program is
 * argv[0], so that case reads /proc/self/exe instead. */
static int own_image_dir(char *out, size_t outlen)
{
    Dl_info info;
    struct link_map *lm = NULL;
    char path[PATH_MAX];
    if (!dladdr1((void *)own_image_dir, &info, (void **)&lm, RTLD_DL_LINKMAP))
        return -1;
    if (lm && lm->l_name && lm->l_name[0]) {
        if (!realpath(lm->l_name, path))
            return -1;
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0)
            return -1;
        path[n] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    tern_strlcpy(out, path, outlen);
    return 0;
}

/* <dir of libtern.so>/tern works in build/lib and in <prefix>/lib; a program
 * with the core linked in looks in <its dir>/../lib/tern; then the compiled-in
 * build and install directories. */
static void default_dir_resolve(char *out, size_t outlen)
{
    char self[PATH_MAX], cand[PATH_MAX + 32];
    if (own_image_dir(self, sizeof self) == 0) {
        tern_plugin_fmt(cand, sizeof cand, "%s/tern", self);
        if (is_dir(cand))
            goto found;
        tern_plugin_fmt(cand, sizeof cand, "%s/../lib/tern", self);
        if (is_dir(cand) && realpath(cand, self))
            tern_strlcpy(cand, self, sizeof cand);
        if (is_dir(cand))
            goto found;
    }
    tern_strlcpy(cand, is_dir(TERN_PLUGIN_BUILD_DIR) ? TERN_PLUGIN_BUILD_DIR
                                                     : TERN_PLUGIN_INSTALL_DIR,
                 sizeof cand);
found:
    tern_strlcpy(out, cand, outlen);
}

const char *tern_plugin_default_dir(void)
{
    /* Computed on every call into a thread-local buffer: no shared state,
     * and the answer may change if directories appear. */
    static _Thread_local char dir[PATH_MAX];
    default_dir_resolve(dir, sizeof dir);
    return dir;
}

/* ---- the search order ---------------------------------------------------------------- */

/* A small list of directories without duplicates. */
typedef struct dirlist {
    char **d;
    size_t n, cap;
} dirlist;

static int dirlist_add(dirlist *l, const char *dir, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->d[i]) == len && strncmp(l->d[i], dir, len) == 0)
            return 0;
    char **nd = tern_array_room(l->d, l->n, &l->cap, sizeof *nd, 8);
    if (!nd)
        return TERN_ERR_NOMEM;
    l->d = nd;
    if (!(l->d[l->n] = strndup(dir, len)))
        return TERN_ERR_NOMEM;
    l->n++;
    return 0;
}

static void dirlist_free(dirlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->d[i]);
    free(l->d);
}

/* $TERN_PLUGIN_PATH, then plugin_path, then the default directory.  The
 * configuration loader already put $TERN_PLUGIN_PATH in front of
 * plugin_path; reading it here too keeps the order for a configuration
 * built another way, and a directory listed twice is searched once. */
static int search_dirs(const tern_config *cfg, dirlist *l)
{
    const char *env = getenv("TERN_PLUGIN_PATH");
    int rc = 0;
    while (env && *env && rc == 0) {
        const char *colon = strchr(env, ':');
        size_t len = colon ? (size_t)(colon - env) : strlen(env);
        rc = dirlist_add(l, env, len);
        env = colon ? colon + 1 : NULL;
    }
    for (size_t i = 0; cfg && rc == 0 && i < cfg->nplugin_path; i++)
        if (cfg->plugin_path[i])
            rc = dirlist_add(l, cfg->plugin_path[i], strlen(cfg->plugin_path[i]));
    const char *def = tern_plugin_default_dir();
    return rc ? rc : dirlist_add(l, def, strlen(def));
}

/* Append ", <s>" (or "<s>" first) to the list of tried paths, bounded. */
static void tried_add(char *buf, size_t len, const char *s)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    tern_plugin_fmt(buf + used, len - used, "%s%s", used ? ", " : "", s);
}

/* An explicit `path` is the only candidate: the user pinned that file, so
 * falling back to another one would hide the mistake.  A relative path is
 * tried next to the configuration file first, then as given.  A directory
 * means <dir>/<prefix><name>.so. */
static int find_explicit(const tern_plugin_ref *ref, char *found, size_t foundlen, char *tried,
                         size_t triedlen)
{
    const char *origin = ref->cfg ? ref->cfg->origin : NULL, *path = ref->entry_path;
    char cand[2][PATH_MAX];
    int ncand = 0;
    if (path[0] != '/' && origin && origin[0] != '<' && strchr(origin, '/')) {
        int n = (int)(strrchr(origin, '/') - origin);
        tern_plugin_fmt(cand[ncand++], PATH_MAX, "%.*s/%s", n, origin, path);
    }
    /* dlopen searches the library path for a name without '/': avoid that. */
    tern_plugin_fmt(cand[ncand++], PATH_MAX, "%s%s", strchr(path, '/') ? "" : "./", path);
    for (int i = 0; i < ncand; i++) {
        char file[PATH_MAX + 80];
        if (is_dir(cand[i]))
            tern_plugin_fmt(file, sizeof file, "%s/%s%s.so", cand[i], ref->kind->prefix,
                            ref->name);
        else
            tern_strlcpy(file, cand[i], sizeof file);
        tried_add(tried, triedlen, file);
        if (is_file(file)) {
            tern_strlcpy(found, file, foundlen);
            return 1;
        }
    }
    return 0;
}

/* " (did you mean 'rdma'? <dir>/libtern-rdma.so is installed)" when a
 * plugin of the same kind installed in the searched directories has a name
 * within edit distance 2 of the one asked for; "" otherwise. */
static void did_you_mean(const tern_plugin_ref *ref, const dirlist *l, char *hint, size_t hintlen)
{
    const char *prefix = ref->kind->prefix;
    size_t plen = strlen(prefix), fixed = plen + 3; /* prefix and ".so" */
    char names[64][TERN_NAME_MAX];
    size_t dirix[64];
    const char *ptrs[64];
    size_t n = 0;
    for (size_t i = 0; i < l->n && n < 64; i++) {
        DIR *d = opendir(l->d[i]);
        struct dirent *de;
        while (d && n < 64 && (de = readdir(d)) != NULL) {
            size_t len = strlen(de->d_name);
            if (len <= fixed || len - fixed >= TERN_NAME_MAX ||
                strncmp(de->d_name, prefix, plen) || strcmp(de->d_name + len - 3, ".so"))
                continue;
            tern_plugin_fmt(names[n], TERN_NAME_MAX, "%.*s", (int)(len - fixed),
                            de->d_name + plen);
            dirix[n] = i;
            ptrs[n] = names[n];
            n++;
        }
        if (d)
            closedir(d);
    }
    const char *best = cfg_closest(ref->name, ptrs, n);
    for (size_t i = 0; best && i < n; i++)
        if (ptrs[i] == best) {
            tern_plugin_fmt(hint, hintlen, " (did you mean '%s'? %s/%s%s.so is installed)", best,
                            l->d[dirix[i]], prefix, best);
            return;
        }
}

tern_load_outcome tern_plugin_find_file(const tern_plugin_ref *ref, char *path, size_t pathlen,
                                        char *msg, size_t msglen)
{
    const tern_plugin_kind *k = ref->kind;
    char tried[768] = "";
    if (ref->entry_path && ref->entry_path[0]) {
        if (find_explicit(ref, path, pathlen, tried, sizeof tried))
            return TERN_LOAD_OK;
        const char *origin = ref->cfg && ref->cfg->origin ? ref->cfg->origin : "the config";
        tern_plugin_fmt(msg, msglen, "%s: plugin not found at its configured path; tried: %s "
                        "(check `path` in %s)", ref->label, tried, origin);
        return TERN_LOAD_NOT_FOUND;
    }
    dirlist l = {0};
    int rc = search_dirs(ref->cfg, &l), hit = 0;
    for (size_t i = 0; rc == 0 && i < l.n && !hit; i++) {
        char file[PATH_MAX + 80];
        tern_plugin_fmt(file, sizeof file, "%s/%s%s.so", l.d[i], k->prefix, ref->name);
        tried_add(tried, sizeof tried, file);
        if (is_file(file)) {
            tern_strlcpy(path, file, pathlen);
            hit = 1;
        }
    }
    char hint[TERN_NAME_MAX + PATH_MAX + 64] = "";
    if (!hit && rc == 0)
        did_you_mean(ref, &l, hint, sizeof hint);
    dirlist_free(&l);
    if (hit)
        return TERN_LOAD_OK;
    tern_plugin_fmt(msg, msglen, "%s: %s%s.so not found%s; tried: %s (%s)", ref->label,
                    k->prefix, ref->name, hint, rc ? "(out of memory)" : tried, k->search_hint);
    return TERN_LOAD_NOT_FOUND;
}

/* ---- checking the exported table --------------------------------------------------- */

static int op_is_null(const void *t, size_t off)
{
    void (*fn)(void);
    memcpy(&fn, (const char *)t + off, sizeof fn);
    return fn == NULL;
}

#define FAIL(o, ...) (tern_plugin_fmt(msg, msglen, __VA_ARGS__), (o))

/* The checks every kind shares, in the order a broken plugin fails them.
 * symsize is the ELF size of the symbol (0 when unknown). */
static tern_load_outcome check_table(const tern_plugin_ref *ref, const char *f,
                                     const tern_plugin_head *t, size_t symsize, char *msg,
                                     size_t msglen)
{
    const tern_plugin_kind *k = ref->kind;
    const char *l = ref->label;
    if (symsize && symsize < sizeof *t)
        return FAIL(TERN_LOAD_TOO_SMALL, "%s: %s: symbol %s is only %zu bytes, not a tern %s "
                    "table", l, f, k->symbol, symsize, k->what);
    if (t->magic != k->magic)
        return FAIL(TERN_LOAD_BAD_MAGIC, "%s: %s: symbol %s has wrong magic 0x%016llx "
                    "(expected 0x%016llx): not a tern %s plugin, or corrupted", l, f, k->symbol,
                    (unsigned long long)t->magic, (unsigned long long)k->magic, k->what);
    if (t->abi_major != k->abi_major)
        return FAIL(TERN_LOAD_ABI_MISMATCH, "%s: %s: built for %s ABI major %u (%u.%u), this "
                    "tern supports major %u: rebuild the plugin against this tern's headers", l,
                    f, k->what, t->abi_major, t->abi_major, t->abi_minor, k->abi_major);
    if (t->struct_size < k->min_size)
        return FAIL(TERN_LOAD_TOO_SMALL, "%s: %s: struct_size %u is smaller than the v1.0 "
                    "layout (%zu bytes): the plugin is truncated or miscompiled", l, f,
                    t->struct_size, k->min_size);
    if (symsize && symsize < t->struct_size)
        return FAIL(TERN_LOAD_TOO_SMALL, "%s: %s: struct_size says %u bytes but the symbol is "
                    "only %zu bytes", l, f, t->struct_size, symsize);
    if (!t->name || strcmp(t->name, ref->name) != 0)
        return FAIL(TERN_LOAD_NAME_MISMATCH, "%s: %s: the plugin calls itself '%.64s', not "
                    "'%s': %s", l, f, t->name ? t->name : "(null)", ref->name, k->name_hint);
    for (size_t i = 0; i < k->nmandatory; i++)
        if (op_is_null(t, k->mandatory[i].off))
            return FAIL(TERN_LOAD_MISSING_OP, "%s: %s: mandatory operation '%s' is NULL", l, f,
                        k->mandatory[i].name);
    char why[512];
    if (k->check && k->check(t, why, sizeof why) < 0)
        return FAIL(TERN_LOAD_MISSING_OP, "%s: %s: %s", l, f, why);
    return TERN_LOAD_OK;
}

/* The core's copy: the members the plugin's struct_size covers, zero past
 * them, then the defaults for what is still NULL. */
static void copy_table(const tern_plugin_kind *k, const tern_plugin_head *t, void *table)
{
    size_t n = t->struct_size < k->size ? t->struct_size : k->size;
    memcpy(table, t, n);
    memset((char *)table + n, 0, k->size - n);
    k->fill_defaults(table);
}

tern_load_outcome tern_plugin_open_file(const tern_plugin_ref *ref, const char *path, void *table,
                                        void **dl, const void **exported, char *msg,
                                        size_t msglen)
{
    const tern_plugin_kind *k = ref->kind;
    char why[768];
    *dl = NULL;
    if (tern_file_check_regular(path, why, sizeof why) < 0) /* a FIFO would block dlopen */
        return FAIL(TERN_LOAD_DLOPEN, "%s: %s", ref->label, why);
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        return FAIL(TERN_LOAD_DLOPEN, "%s: dlopen failed: %s (check that %s is a shared object "
                    "for this machine and that `ldd` finds every library it needs)", ref->label,
                    e ? e : "(no dlerror text)", path);
    }
    dlerror();
    const tern_plugin_head *t = dlsym(h, k->symbol);
    if (!t) {
        const char *e = dlerror();
        tern_plugin_fmt(msg, msglen, "%s: %s does not export the symbol %s: not a tern %s "
                        "plugin (%s)", ref->label, path, k->symbol, k->what,
                        e ? e : "symbol is NULL");
        dlclose(h);
        return TERN_LOAD_NO_SYMBOL;
    }
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    size_t symsize = 0;
    if (dladdr1((void *)t, &info, (void **)&sym, RTLD_DL_SYMENT) && sym)
        symsize = sym->st_size;
    tern_load_outcome o = check_table(ref, path, t, symsize, msg, msglen);
    if (o != TERN_LOAD_OK) {
        dlclose(h);
        return o;
    }
    copy_table(k, t, table);
    *dl = h;
    if (exported)
        *exported = t;
    return TERN_LOAD_OK;
}
