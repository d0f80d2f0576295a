/* core/config/cfg_internal.h: the types the files of core/config/ share;
 * each file declares its functions in its own header (x.c: x.h).
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

/* ---- the node tree (yaml_tree.c) and the reading context ------------------ */
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

/* Where a mapping member is reported: at its key. */
#define AT(k) (k)->line, (k)->col


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


/* ---- a checked value (option.c), stored by load.c ------------------------------ */
typedef struct cfg_value {
    int64_t i;                /* INT, CHOICE (index), BOOL */
    uint64_t u;               /* SIZE */
} cfg_value;


#endif
