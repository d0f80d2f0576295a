/* core/host/topology.c: NUMA-aware device choice (docs/architecture.md, Topology).
 *
 * A topology is built once (sysfs discovery or a JSON matrix) and is
 * immutable afterwards, so tern_topology_select() reads it without a lock.
 * The only mutable state is atomic: the per-device "down" flags, the random
 * generator (a splitmix64 counter, relaxed load/store per pick) and the
 * round-robin counter (fetch_add, so rotation stays exact across threads). */
#include "host/topology.h"

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <numa.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "base/fileio.h"
#include "base/util.h"

#define TOPO_LOC_MAX 64
#define TOPO_MAX_NODES 1024
#define TOPO_MAX_LOCATIONS 4096
#define TOPO_WILDCARD "*"
#define SPLITMIX_GAMMA 0x9E3779B97F4A7C15ULL

/* One location: n device indices, the first npref preferred, the rest
 * available, in the order the matrix gives them. */
typedef struct topo_entry {
    char loc[TOPO_LOC_MAX];
    uint32_t hash, len;       /* of loc: one compare per entry on lookup */
    int n, npref;
    int dev[TERN_MAX_DEVICES];
} topo_entry;

struct tern_topology {
    int ndev;
    char names[TERN_MAX_DEVICES][TERN_NAME_MAX];
    atomic_uchar down[TERN_MAX_DEVICES];
    topo_entry *ent;
    size_t nent;
    size_t wildcard;          /* index of "*" in ent (always present) */
    int policy;               /* TERN_SELECT_* */
    /* Written on every retry-0 pick: each on its own cache line, so that
     * the read-mostly fields above are not invalidated on other cores. */
    _Alignas(64) _Atomic uint64_t rng; /* splitmix64 state */
    _Alignas(64) _Atomic uint64_t rr;  /* round-robin counter */
    char pad[64 - sizeof(uint64_t)];
};

/* ---- construction helpers ------------------------------------------------ */

static tern_topology *topo_alloc(int policy, size_t nent_max)
{
    /* aligned_alloc: the counters are _Alignas(64) (sizeof is a multiple). */
    tern_topology *t = aligned_alloc(_Alignof(tern_topology), sizeof(*t));
    if (!t)
        return NULL;
    memset(t, 0, sizeof(*t));
    t->ent = calloc(nent_max ? nent_max : 1, sizeof(*t->ent));
    if (!t->ent) {
        free(t);
        return NULL;
    }
    t->policy = policy;
    /* Distinct streams per topology: mix the clock with the address. */
    tern_topology_seed(t, tern_now_ns() ^ (uint64_t)(uintptr_t)t);
    return t;
}

void tern_topology_free(tern_topology *t)
{
    if (!t)
        return;
    free(t->ent);
    free(t);
}

void tern_topology_seed(tern_topology *t, uint64_t seed)
{
    if (t) {
        atomic_store(&t->rng, seed);
        atomic_store(&t->rr, 0);
    }
}

/* Check the device names: non-empty, fit, unique. */
static int topo_set_names(tern_topology *t, const tern_device_info *devs, int ndev,
                          char *err, size_t errlen)
{
    if (ndev <= 0 || ndev > TERN_MAX_DEVICES || !devs)
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "topology: %d devices given; expected 1..%d", ndev, TERN_MAX_DEVICES);
    for (int i = 0; i < ndev; i++) {
        size_t len = strnlen(devs[i].name, TERN_NAME_MAX);
        if (len == 0 || len >= TERN_NAME_MAX)
            return tern_errf(err, errlen, TERN_ERR_INVAL,
                             "topology: device %d has an empty or unterminated name", i);
        for (int j = 0; j < i; j++)
            if (strcmp(devs[j].name, devs[i].name) == 0)
                return tern_errf(err, errlen, TERN_ERR_INVAL,
                                 "topology: device name '%s' is listed twice (indices %d and %d)",
                                 devs[i].name, j, i);
        memcpy(t->names[i], devs[i].name, len + 1);
    }
    t->ndev = ndev;
    return 0;
}

static int topo_find_name(const tern_topology *t, const char *name)
{
    for (int i = 0; i < t->ndev; i++)
        if (strcmp(t->names[i], name) == 0)
            return i;
    return -1;
}

/* FNV-1a of a location and its length; 0 length when longer than any key. */
static uint32_t topo_loc_hash(const char *loc, uint32_t *len)
{
    uint32_t h = 2166136261u, n = 0;
    for (; loc[n]; n++) {
        if (n + 1 >= TOPO_LOC_MAX) {
            *len = 0;
            return 0;
        }
        h = (h ^ (unsigned char)loc[n]) * 16777619u;
    }
    *len = n;
    return h;
}

static topo_entry *topo_add_entry(tern_topology *t, const char *loc)
{
    topo_entry *e = &t->ent[t->nent++];
    tern_strlcpy(e->loc, loc, sizeof(e->loc));
    e->hash = topo_loc_hash(e->loc, &e->len);
    return e;
}

/* Hot path: the hash and length rule out the other entries without a
 * string compare. */
static const topo_entry *topo_find_entry(const tern_topology *t, const char *loc)
{
    if (!loc)
        return NULL;
    uint32_t len, h = topo_loc_hash(loc, &len);
    if (len == 0)
        return NULL;
    for (size_t i = 0; i < t->nent; i++) {
        const topo_entry *e = &t->ent[i];
        if (e->hash == h && e->len == len && memcmp(e->loc, loc, len) == 0)
            return e;
    }
    return NULL;
}

/* ---- discovery -------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* NUMA node ids from <root>/devices/system/node/node<N> directories, sorted.
 * A missing directory (a kernel without NUMA) yields zero nodes. */
static int topo_read_nodes(const char *root, int *nodes, int max)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/devices/system/node", root);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < max) {
        const char *s = de->d_name;
        if (strncmp(s, "node", 4) != 0 || s[4] < '0' || s[4] > '9')
            continue;
        char *end;
        long id = strtol(s + 4, &end, 10);
        if (*end != '\0' || id < 0 || id > 65535)
            continue;
        struct stat st;
        char sub[4096 + 300];
        snprintf(sub, sizeof(sub), "%s/%s", path, s);
        if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            nodes[n++] = (int)id;
    }
    closedir(d);
    qsort(nodes, (size_t)n, sizeof(int), cmp_int);
    return n;
}

/* numa_node of one device: as given, or read from sysfs when -2.  Any
 * problem (no PCI path, no file, garbage) means unknown (-1). */
static int topo_device_node(const char *root, const tern_device_info *dev)
{
    if (dev->numa_node != -2)
        return dev->numa_node >= 0 ? dev->numa_node : -1;
    if (dev->sysfs_path[0] == '\0')
        return -1;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%.256s/numa_node", root, dev->sysfs_path);
    char *buf = NULL; /* under the configured sysfs root: never block on it */
    if (tern_file_read_capped(path, 32, &buf, NULL, NULL, 0) != 0)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    int bad = end == buf || errno || v < 0 || v > 65535;
    free(buf);
    return bad ? -1 : (int)v;
}

static int topo_allowed(const char *name, const char *const *allow, size_t nallow)
{
    if (!allow || nallow == 0)
        return 1;
    for (size_t i = 0; i < nallow; i++)
        if (allow[i] && strcmp(allow[i], name) == 0)
            return 1;
    return 0;
}

int tern_topology_discover(const char *sysfs_root, const tern_device_info *devs, int ndev,
                           const char *const *allow, size_t nallow, int policy,
                           tern_topology **out, char *err, size_t errlen)
{
    if (!out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "topology: no output pointer");
    *out = NULL;
    const char *root = (sysfs_root && *sysfs_root) ? sysfs_root : "/sys";
    int *nodes = malloc(sizeof(int) * TOPO_MAX_NODES);
    if (!nodes)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "topology: out of memory");
    int nnodes = topo_read_nodes(root, nodes, TOPO_MAX_NODES);
    tern_topology *t = topo_alloc(policy, (size_t)nnodes + 1);
    if (!t) {
        free(nodes);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "topology: out of memory");
    }
    int rc = topo_set_names(t, devs, ndev, err, errlen);
    int numa[TERN_MAX_DEVICES], use[TERN_MAX_DEVICES], nuse = 0;
    for (int i = 0; rc == 0 && i < ndev; i++) {
        numa[i] = topo_device_node(root, &devs[i]);
        if (topo_allowed(devs[i].name, allow, nallow))
            use[nuse++] = i;
    }
    if (rc == 0 && nuse == 0)
        rc = tern_errf(err, errlen, TERN_ERR_NOT_FOUND,
                       "topology: the allow-list of the `devices` key (first '%s') keeps "
                       "none of the %d devices found (first is '%s'); list some of them in "
                       "`devices`, or leave it empty for all",
                       nallow ? allow[0] : "", ndev, devs[0].name);
    for (int k = 0; rc == 0 && k < nnodes; k++) {
        char loc[TOPO_LOC_MAX];
        snprintf(loc, sizeof(loc), "cpu:%d", nodes[k]);
        topo_entry *e = topo_add_entry(t, loc);
        for (int j = 0; j < nuse; j++)   /* same node: preferred */
            if (numa[use[j]] == nodes[k])
                e->dev[e->n++] = use[j];
        e->npref = e->n;
        for (int j = 0; j < nuse; j++)   /* elsewhere or unknown: available */
            if (numa[use[j]] != nodes[k])
                e->dev[e->n++] = use[j];
    }
    free(nodes);
    if (rc == 0) {
        topo_entry *w = topo_add_entry(t, TOPO_WILDCARD);
        for (int j = 0; j < nuse; j++)
            w->dev[w->n++] = use[j];
        w->npref = w->n;
        t->wildcard = t->nent - 1;
        *out = t;
        return 0;
    }
    tern_topology_free(t);
    return rc;
}

/* ---- JSON ------------------------------------------------------------- */

/* Parse one [[pref...],[avail...]] value into e, resolving names (adding
 * them in order of first appearance when the topology has no device list). */
static int topo_parse_lists(tern_topology *t, int fixed_names, topo_entry *e,
                            json_object *val, char *err, size_t errlen)
{
    if (!json_object_is_type(val, json_type_array) || json_object_array_length(val) != 2)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "topology matrix: \"%s\": expected [[preferred...], [available...]]",
                         e->loc);
    for (size_t l = 0; l < 2; l++) {
        json_object *list = json_object_array_get_idx(val, l);
        const char *what = l == 0 ? "preferred" : "available";
        if (!json_object_is_type(list, json_type_array))
            return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "topology matrix: \"%s\": the %s list is not an array", e->loc, what);
        size_t n = json_object_array_length(list);
        for (size_t i = 0; i < n; i++) {
            json_object *s = json_object_array_get_idx(list, i);
            if (!json_object_is_type(s, json_type_string))
                return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                                 "topology matrix: \"%s\": %s[%zu] is not a device name string",
                                 e->loc, what, i);
            const char *name = json_object_get_string(s);
            size_t len = strlen(name);
            if (len == 0 || len >= TERN_NAME_MAX)
                return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                                 "topology matrix: \"%s\": %s[%zu] is empty or longer than %d",
                                 e->loc, what, i, TERN_NAME_MAX - 1);
            int d = topo_find_name(t, name);
            if (d < 0 && fixed_names)
                return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                                 "topology matrix: \"%s\": device '%s' is not one of the %d "
                                 "devices of this transport", e->loc, name, t->ndev);
            if (d < 0) {
                if (t->ndev >= TERN_MAX_DEVICES)
                    return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                                     "topology matrix: \"%s\": more than %d devices",
                                     e->loc, TERN_MAX_DEVICES);
                d = t->ndev++;
                memcpy(t->names[d], name, len + 1);
            }
            for (int k = 0; k < e->n; k++)
                if (e->dev[k] == d)
                    return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                                     "topology matrix: \"%s\": device '%s' is listed twice",
                                     e->loc, name);
            e->dev[e->n++] = d;
        }
        if (l == 0)
            e->npref = e->n;
    }
    return 0;
}

/* The wildcard when the matrix has none: every device it names, by index. */
static void topo_add_wildcard(tern_topology *t)
{
    int seen[TERN_MAX_DEVICES] = {0};
    for (size_t i = 0; i < t->nent; i++)
        for (int k = 0; k < t->ent[i].n; k++)
            seen[t->ent[i].dev[k]] = 1;
    topo_entry *w = topo_add_entry(t, TOPO_WILDCARD);
    for (int d = 0; d < t->ndev; d++)
        if (seen[d])
            w->dev[w->n++] = d;
    w->npref = w->n;
    t->wildcard = t->nent - 1;
}

static int topo_parse_matrix(tern_topology *t, int fixed_names, json_object *root,
                             char *err, size_t errlen)
{
    if (!json_object_is_type(root, json_type_object))
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "topology matrix: expected a JSON object {location: [[...],[...]]}");
    int has_wild = 0;
    json_object_object_foreach(root, key, val) {
        size_t klen = strlen(key);
        if (klen == 0 || klen >= TOPO_LOC_MAX)
            return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "topology matrix: location key \"%.80s\" is empty or longer than %d",
                             key, TOPO_LOC_MAX - 1);
        topo_entry *e = topo_add_entry(t, key);
        int rc = topo_parse_lists(t, fixed_names, e, val, err, errlen);
        if (rc)
            return rc;
        if (strcmp(key, TOPO_WILDCARD) == 0) {
            has_wild = 1;
            t->wildcard = t->nent - 1;
        }
    }
    if (t->nent == 0)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "topology matrix: no location in it");
    if (!has_wild)
        topo_add_wildcard(t);
    return 0;
}

int tern_topology_from_json(const char *json, const tern_device_info *devs, int ndev,
                            int policy, tern_topology **out, char *err, size_t errlen)
{
    if (!out || !json)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "topology matrix: no input or output");
    *out = NULL;
    enum json_tokener_error jerr = json_tokener_success;
    json_object *root = json_tokener_parse_verbose(json, &jerr);
    if (!root)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "topology matrix: not valid JSON: %s",
                         json_tokener_error_desc(jerr));
    size_t nkeys = json_object_is_type(root, json_type_object)
                       ? (size_t)json_object_object_length(root) : 0;
    int rc = 0;
    tern_topology *t = NULL;
    if (nkeys > TOPO_MAX_LOCATIONS)
        rc = tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                       "topology matrix: %zu locations (at most %d)", nkeys, TOPO_MAX_LOCATIONS);
    else if (!(t = topo_alloc(policy, nkeys + 1)))
        rc = tern_errf(err, errlen, TERN_ERR_NOMEM, "topology: out of memory");
    if (rc == 0 && devs)
        rc = topo_set_names(t, devs, ndev, err, errlen);
    if (rc == 0)
        rc = topo_parse_matrix(t, devs != NULL, root, err, errlen);
    json_object_put(root);
    if (rc) {
        tern_topology_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static json_object *topo_names_json(const tern_topology *t, const int *dev, int n)
{
    json_object *a = json_object_new_array();
    for (int i = 0; a && i < n; i++)
        json_object_array_add(a, json_object_new_string(t->names[dev[i]]));
    return a;
}

char *tern_topology_to_json(const tern_topology *t)
{
    if (!t)
        return NULL;
    json_object *root = json_object_new_object();
    if (!root)
        return NULL;
    for (size_t i = 0; i < t->nent; i++) {
        const topo_entry *e = &t->ent[i];
        json_object *pair = json_object_new_array();
        json_object_array_add(pair, topo_names_json(t, e->dev, e->npref));
        json_object_array_add(pair, topo_names_json(t, e->dev + e->npref, e->n - e->npref));
        json_object_object_add(root, e->loc, pair);
    }
    char *s = tern_strdup(json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

/* One line per location, for tern-info. */
char *tern_topology_to_text(const tern_topology *t)
{
    if (!t)
        return NULL;
    size_t cap = 256 + t->nent * (TOPO_LOC_MAX + 40 + (size_t)TERN_MAX_DEVICES * TERN_NAME_MAX);
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t off = 0;
    for (size_t i = 0; i < t->nent; i++) {
        const topo_entry *e = &t->ent[i];
        off += (size_t)snprintf(s + off, cap - off, "%-8s preferred:", e->loc);
        for (int k = 0; k < e->n; k++) {
            if (k == e->npref)
                off += (size_t)snprintf(s + off, cap - off, "  available:");
            off += (size_t)snprintf(s + off, cap - off, " %s%s", t->names[e->dev[k]],
                                    atomic_load(&t->down[e->dev[k]]) ? "(down)" : "");
        }
        if (e->npref == e->n)
            off += (size_t)snprintf(s + off, cap - off, "  available:");
        off += (size_t)snprintf(s + off, cap - off, "\n");
    }
    return s;
}

/* Drop the devices the allow-list does not name from every location (for a
 * matrix given as JSON; discovery filters as it builds).  Only before the
 * topology is shared: it rewrites the lists in place. */
int tern_topology_restrict(tern_topology *t, const char *const *allow, size_t nallow,
                           char *err, size_t errlen)
{
    if (!t)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "topology: none to restrict");
    if (!allow || nallow == 0)
        return 0;
    int left = 0;
    for (size_t i = 0; i < t->nent; i++) {
        topo_entry *e = &t->ent[i];
        int n = 0, npref = 0;
        for (int k = 0; k < e->n; k++) {
            if (!topo_allowed(t->names[e->dev[k]], allow, nallow))
                continue;
            e->dev[n++] = e->dev[k];
            if (k < e->npref)
                npref++;
        }
        e->n = n;
        e->npref = npref;
        left += n;
    }
    if (left == 0)
        return tern_errf(err, errlen, TERN_ERR_NOT_FOUND,
                         "topology: the device allow-list keeps none of the matrix's devices "
                         "(first allowed name is '%s'); check the configuration's devices: list",
                         allow[0] ? allow[0] : "");
    return 0;
}

/* ---- queries ----------------------------------------------------------- */

int tern_topology_device_count(const tern_topology *t) { return t ? t->ndev : 0; }

const char *tern_topology_device_name(const tern_topology *t, int dev)
{
    return (t && dev >= 0 && dev < t->ndev) ? t->names[dev] : NULL;
}

int tern_topology_device_index(const tern_topology *t, const char *name)
{
    if (!t || !name)
        return TERN_ERR_INVAL;
    int d = topo_find_name(t, name);
    return d >= 0 ? d : TERN_ERR_NOT_FOUND;
}

void tern_topology_mark_down(tern_topology *t, int dev, int down)
{
    if (t && dev >= 0 && dev < t->ndev)
        atomic_store_explicit(&t->down[dev], down ? 1 : 0, memory_order_release);
}

int tern_topology_is_down(const tern_topology *t, int dev)
{
    if (!t || dev < 0 || dev >= t->ndev)
        return TERN_ERR_INVAL;
    return atomic_load_explicit(&((tern_topology *)t)->down[dev], memory_order_acquire);
}

/* ---- select_device ------------------------------------------------------ */

/* splitmix64 over a shared counter.  A relaxed load and store, not a
 * locked add: two threads racing may read the same state and make the same
 * pick, which costs nothing here, while a locked add costs more than the
 * rest of select_device. */
static uint64_t topo_random(tern_topology *t)
{
    uint64_t z = atomic_load_explicit(&t->rng, memory_order_relaxed) + SPLITMIX_GAMMA;
    atomic_store_explicit(&t->rng, z, memory_order_relaxed);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* From position start, the first device that is up (wrapping): a down
 * device is skipped, the others keep their positions. */
static int topo_first_up(tern_topology *t, const topo_entry *e, int start)
{
    for (int s = 0; s < e->n; s++) {
        int d = e->dev[(start + s) % e->n];
        if (!atomic_load_explicit(&t->down[d], memory_order_relaxed))
            return d;
    }
    return -1;
}

/* A pick in e->dev[lo, lo+n): the r-th device if it is up (the common
 * case), else the (r mod up)-th device that is up.  Either way every device
 * that is up has the same chance. */
static int topo_pick_in(tern_topology *t, const topo_entry *e, int lo, int n, uint64_t r)
{
    if (n <= 0)
        return -1;
    int d = e->dev[lo + (int)(r % (uint64_t)n)];
    if (!atomic_load_explicit(&t->down[d], memory_order_relaxed))
        return d;
    int up[TERN_MAX_DEVICES], m = 0;
    for (int i = lo; i < lo + n; i++)
        if (!atomic_load_explicit(&t->down[e->dev[i]], memory_order_relaxed))
            up[m++] = e->dev[i];
    return m ? up[r % (uint64_t)m] : -1;
}

static int topo_select_in(tern_topology *t, const topo_entry *e, int retry, const char *hint)
{
    if (e->n == 0)
        return -1;
    if (retry >= 1)
        return topo_first_up(t, e, (retry - 1) % e->n);
    /* The hint (destination-device affinity) wins at the first try only,
     * so that retries still walk every device. */
    if (hint && *hint)
        for (int k = 0; k < e->n; k++)
            if (strcmp(t->names[e->dev[k]], hint) == 0 &&
                !atomic_load_explicit(&t->down[e->dev[k]], memory_order_relaxed))
                return e->dev[k];
    /* Preferred when any is up, else available. */
    uint64_t r = t->policy == TERN_SELECT_ROUND_ROBIN
                     ? atomic_fetch_add_explicit(&t->rr, 1, memory_order_relaxed)
                     : topo_random(t) >> 11;
    int d = topo_pick_in(t, e, 0, e->npref, r);
    return d >= 0 ? d : topo_pick_in(t, e, e->npref, e->n - e->npref, r);
}

int tern_topology_select(tern_topology *t, const char *location, int retry, const char *hint)
{
    if (!t || t->nent == 0)
        return TERN_ERR_INVAL;
    if (retry < 0)
        retry = 0;
    const topo_entry *w = &t->ent[t->wildcard];
    const topo_entry *e = topo_find_entry(t, location);
    int d = e ? topo_select_in(t, e, retry, hint) : -1;
    /* Unknown location, or nothing usable there: any device ("*"). */
    if (d < 0 && e != w)
        d = topo_select_in(t, w, retry, hint);
    return d >= 0 ? d : TERN_ERR_NOT_FOUND;
}

/* Devices of e[lo, lo+n) that are up, appended to out. */
static int topo_up_in(tern_topology *t, const topo_entry *e, int lo, int n, int *out, int max)
{
    int m = 0;
    for (int i = lo; i < lo + n && m < max; i++)
        if (!atomic_load_explicit(&t->down[e->dev[i]], memory_order_relaxed))
            out[m++] = e->dev[i];
    return m;
}

int tern_topology_candidates(tern_topology *t, const char *location, int *out, int max)
{
    if (!t || t->nent == 0 || !out || max <= 0)
        return 0;
    const topo_entry *w = &t->ent[t->wildcard];
    const topo_entry *e = topo_find_entry(t, location);
    int m = 0;
    if (e) {
        m = topo_up_in(t, e, 0, e->npref, out, max);
        if (m == 0)
            m = topo_up_in(t, e, e->npref, e->n - e->npref, out, max);
    }
    if (m == 0 && e != w)
        m = topo_up_in(t, w, 0, w->n, out, max);
    return m;
}

/* ---- memory location ---------------------------------------------------- */

/* move_pages() with a NULL node list only queries: it never faults a page
 * in (get_mempolicy(MPOL_F_NODE|MPOL_F_ADDR) would).  So a page that was
 * never touched reports "*" (unknown), as does a machine without NUMA. */
void tern_memory_location(const void *addr, char *out, size_t outlen)
{
    if (!out || outlen == 0)
        return;
    tern_strlcpy(out, TOPO_WILDCARD, outlen);
    if (!addr || numa_available() < 0)
        return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *page = (void *)((uintptr_t)addr & ~(pg - 1));
    int status = -1;
    if (numa_move_pages(0, 1, &page, NULL, &status, 0) == 0 && status >= 0)
        snprintf(out, outlen, "cpu:%d", status);
}
