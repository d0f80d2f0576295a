/* core/config/cfg_internal.h: what the files of core/config/ share.
 *
 *   yaml_tree.c  YAML text -> a bounded tree of nodes with positions
 *   values.c     value parsers and checks (sizes, integers, host:port, URIs)
 *   option.c     the one validator of a value against a tern_option, used
 *                for the core's keys and for every plugin's option table
 *   schema.c     the core's keys: one table (type, range, default,
 *                environment override, where the value lands)
 *   transports.c the `transports:` list
 *   load.c       defaults, environment, file and embedded loading
 *   json.c       the resolved configuration and the schema as JSON
 *
 * Every failure is ONE message "ORIGIN:LINE:COL: KEY.PATH: expected WHAT,
 * got WHAT" and TERN_ERR_CONFIG (see docs/configuration.md, Errors). */
#ifndef TERN_CORE_CONFIG_INTERNAL_H
#define TERN_CORE_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "tern/errors.h"

/* ---- limits: generous for any real file, small for a fuzzer -------------- */
#define CFG_MAX_INPUT (1u << 20)   /* bytes of YAML */
#define CFG_MAX_DEPTH 8            /* root map > transports > entry > list */
#define CFG_MAX_NODES 65536
#define CFG_MAX_SCALAR 4096        /* bytes in one scalar */
#define CFG_MAX_KEYS 256           /* keys in one mapping */
#define CFG_MAX_ITEMS 1024         /* items in one list */
#define CFG_MAX_TRANSPORTS 32
#define CFG_MAX_PATH 256           /* key path text */

/* ---- the node tree (yaml_tree.c) ------------------------------------------ */
enum { YN_SCALAR, YN_SEQ, YN_MAP };

typedef struct ynode {
    int kind;
    int isnull;             /* plain "", "~", "null": no value */
    char *text;             /* scalars */
    int line, col;          /* 1-based */
    struct ynode **kids;    /* SEQ: items; MAP: key, value, key, value... */
    size_t n, cap;
} ynode;

typedef struct cfgctx {
    const char *origin;
    const char *env;        /* set: messages read "ENV (environment): ..." */
    char *err;
    size_t errlen;
    const char *input;      /* for positions of reader errors */
    size_t inlen;
    size_t nnodes;
} cfgctx;

void cfg_ynode_free(ynode *n);
/* Parse c->input into a tree (*root NULL for an empty stream). */
int cfg_yaml_to_tree(cfgctx *c, ynode **root);

/* One message, "ORIGIN:LINE:COL: PATH: ..." (control characters shown as ?). */
int cfg_err(cfgctx *c, int line, int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Where a mapping member is reported: at its key. */
#define AT(k) (k)->line, (k)->col

/* What the user wrote, in words: `9000`, `"abc"`, `null`, `a list`. */
const char *cfg_show(const ynode *n, char *buf, size_t len);
/* Printable, bounded rendering of user text (len >= 16). */
const char *cfg_show_text(const char *t, char *buf, size_t len);
/* "base.key" (or "key" at the root) and "base[i]", truncated to fit. */
void cfg_path_join(char *dst, size_t len, const char *base, const char *key);
void cfg_path_index(char *dst, size_t len, const char *base, size_t i);

/* ---- values (values.c) ----------------------------------------------------- */
int cfg_is_int_text(const char *s);
int cfg_parse_i64(const char *t, int64_t *out);
int cfg_parse_bool(const char *t, int *out);
void cfg_fmt_size(uint64_t v, char *buf, size_t len);          /* 65536 -> "64K" */
void cfg_fmt_choices(const char *const *names, char *buf, size_t len);
int cfg_valid_hostport(const char *s, size_t n, int need_port);
int cfg_valid_metadata(const char *u);
int cfg_valid_name(const char *s, size_t max);                  /* [A-Za-z0-9._-] */
/* The closest of `names` within edit distance 2, or NULL. */
const char *cfg_closest(const char *key, const char *const *names, size_t n);
/* "expected WHOSE (did you mean X? | ALL), got unknown key K". */
int cfg_unknown_key(cfgctx *c, const ynode *k, const char *path, const char *whose,
                    const char *const *names, size_t n, const char *all);

/* ---- the core's keys (schema.c) ----------------------------------------------
 * A core key is a tern_option (the form plugins use) plus what only the core
 * needs: where the value lands in tern_config and which environment variable
 * overrides it.  The loader, the defaults, the JSON dump and the reference
 * table in docs/configuration.md all come from this one table. */
enum {
    CFGK_NULLABLE = 1u << 0,  /* null means "unset" (the field stays NULL) */
    CFGK_ALIASES = 1u << 1,   /* CHOICE: any case, and the index as a digit */
    CFGK_U64 = 1u << 2,       /* INT stored in a uint64_t (else an int) */
    CFGK_CUSTOM = 1u << 3,    /* parsed and dumped by transports.c */
};

typedef struct cfg_key {
    tern_option opt;          /* key, type, min, max, choices, default, help */
    const char *what;         /* STRING: what a value must be; LIST: the list */
    const char *item_what;    /* STRING_LIST: what each item must be */
    int (*valid)(const char *text); /* STRING / list item; NULL: not empty */
    unsigned flags;           /* CFGK_* */
    size_t off;               /* the field in tern_config */
    size_t count_off;         /* STRING_LIST: its length */
    const char *env;          /* environment variable overriding it, or NULL:
                                 a scalar is replaced, a list (':'-separated)
                                 goes in front */
    unsigned env_bit;         /* TERN_CFG_ENV_* */
    size_t env_count_off;     /* list with env: how many items it put in front */
    const char *doc_type;     /* the type column of the reference table (NULL:
                                 from the type, e.g. "integer", "`a` | `b`") */
} cfg_key;

extern const cfg_key cfg_keys[];
extern const size_t cfg_nkeys;
const cfg_key *cfg_key_find(const char *name);

/* ---- the validator (option.c) ---------------------------------------------- */
typedef struct cfg_value {
    int64_t i;                /* INT, CHOICE (index), BOOL */
    uint64_t u;               /* SIZE */
} cfg_value;

/* What `o` accepts, in words ("an integer in -1..255"); `k` (NULL for a
 * plugin's option) adds the core's own wording and aliases. */
void cfg_option_what(const tern_option *o, const cfg_key *k, char *buf, size_t len);
/* Check node v (the value of key `at`, reported at `at`) against o.  Scalars
 * only; STRING_LIST is checked by cfg_list_check. */
int cfg_option_check(cfgctx *c, const tern_option *o, const cfg_key *k, const ynode *at,
                     const ynode *v, const char *path, cfg_value *out);
/* A list of scalars (null: empty), each passing k->valid. */
int cfg_list_check(cfgctx *c, const cfg_key *k, const ynode *at, const ynode *v,
                   const char *path);

/* ---- transports (transports.c) ---------------------------------------------- */
int cfg_transports_parse(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v);
void cfg_transports_free(tern_config *cfg);

/* ---- loading (load.c) --------------------------------------------------------- */
/* Apply the root mapping of a tree to cfg. */
int cfg_apply_tree(cfgctx *c, tern_config *cfg, const ynode *root);
/* Store a checked value of key k (from a tree or the environment). */
int cfg_key_set(cfgctx *c, tern_config *cfg, const cfg_key *k, const ynode *kn, const ynode *v);

#endif
