/* core/plugin/plugin_load.h: the one loader behind every kind of plugin
 * (transports, metadata stores).  It finds the file (one search order),
 * opens it and checks the exported table before any plugin code runs (one
 * set of outcomes, each with one message naming the file and what to
 * check), and hands back the core's own copy of the table in which every
 * optional operation the plugin left out holds the core's default, so
 * callers call through it without testing for NULL.
 * See docs/plugins.md, "How tern loads a plugin". */
#ifndef TERN_CORE_PLUGIN_LOAD_H
#define TERN_CORE_PLUGIN_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

typedef enum tern_load_outcome {
    TERN_LOAD_OK = 0,
    TERN_LOAD_NOT_FOUND,      /* no file in any searched directory */
    TERN_LOAD_DLOPEN,         /* not a plugin: dlopen failed (dlerror() text) */
    TERN_LOAD_NO_SYMBOL,      /* not a plugin: the table's symbol is missing */
    TERN_LOAD_BAD_MAGIC,      /* not a plugin: the symbol is not a tern table */
    TERN_LOAD_ABI_MISMATCH,   /* wrong ABI major */
    TERN_LOAD_TOO_SMALL,      /* too old: struct_size below the oldest layout */
    TERN_LOAD_MISSING_OP,     /* bad table: a mandatory operation is NULL */
    TERN_LOAD_NAME_MISMATCH,  /* bad table: the table's name is not the one asked for */
    TERN_LOAD_BAD_OPTION,     /* the YAML entry does not fit the option table */
    TERN_LOAD_INIT_FAILED,    /* init()/open() returned an error: the plugin's message */
    TERN_LOAD_NO_DEVICE,      /* init failed: no usable device */
    TERN_LOAD_NOT_TRIED,      /* not attempted: an earlier transport failed */
} tern_load_outcome;

const char *tern_load_outcome_name(tern_load_outcome o); /* "loaded", "not found", ... */
/* Stable machine key of an outcome for JSON ("loaded", "not_found", ...). */
const char *tern_load_outcome_key(tern_load_outcome o);
/* The error code a failed load returns: TERN_ERR_PLUGIN for a file that is
 * missing or not a plugin, TERN_ERR_ABI for a table built wrong,
 * TERN_ERR_CONFIG for a bad option. */
int tern_load_outcome_err(tern_load_outcome o);

/* The first members of every plugin table, in this order and of these
 * types (tern_transport, tern_metastore; checked in plugin_kinds.c). */
typedef struct tern_plugin_head {
    uint64_t magic;
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;
    const char *name;         /* transport name, store scheme */
    const char *version;
} tern_plugin_head;

/* A mandatory operation: its name for messages, its offset in the table. */
typedef struct tern_plugin_op {
    const char *name;
    size_t off;
} tern_plugin_op;

/* How one kind of plugin is named, exported, checked and completed. */
typedef struct tern_plugin_kind {
    const char *what;         /* "transport", "metadata store" */
    const char *prefix;       /* its files are <prefix><name>.so */
    const char *symbol;       /* the exported table */
    uint64_t magic;
    unsigned abi_major;
    size_t min_size;          /* the oldest layout accepted (v1.0) */
    size_t size;              /* this core's layout: the size of the copy */
    const tern_plugin_op *mandatory;
    size_t nmandatory;
    const char *name_hint;    /* what to check when the name differs */
    const char *search_hint;  /* what to check when no file is found */
    /* Checks beyond the common ones, on the plugin's own table: 0, or -1
     * with the reason in why. */
    int (*check)(const void *table, char *why, size_t whylen);
    /* Give every optional operation of the copy that the plugin left out
     * the core's default. */
    void (*fill_defaults)(void *copy);
} tern_plugin_kind;

/* The transport and metadata-store kinds (plugin_kinds.c). */
extern const tern_plugin_kind tern_transport_kind;
extern const tern_plugin_kind tern_metastore_kind;

/* One plugin asked for. */
typedef struct tern_plugin_ref {
    const tern_plugin_kind *kind;
    const char *name;         /* "tcp", "redis" */
    const char *label;        /* how messages start: "transport 'tcp'" */
    const char *entry_path;   /* an explicit `path` (the only candidate), or NULL */
    const tern_config *cfg;   /* plugin_path and the file's origin; may be NULL */
} tern_plugin_ref;

/* Find the file: the entry's path when set, else <prefix><name>.so in
 * $TERN_PLUGIN_PATH, plugin_path, then the default directory (each
 * directory once).  TERN_LOAD_OK with the file in path, or
 * TERN_LOAD_NOT_FOUND with every path tried (and a did-you-mean) in msg. */
tern_load_outcome tern_plugin_find_file(const tern_plugin_ref *ref, char *path, size_t pathlen,
                                        char *msg, size_t msglen);

/* dlopen path and check its table (data only: no plugin code runs).  On
 * TERN_LOAD_OK, *dl is the handle, table (kind->size bytes) the core's
 * copy with defaults filled, and *exported (when not NULL) the plugin's own
 * table.  Otherwise nothing stays open and msg says why. */
tern_load_outcome tern_plugin_open_file(const tern_plugin_ref *ref, const char *path, void *table,
                                        void **dl, const void **exported, char *msg,
                                        size_t msglen);

/* The in-tree / installed plugin directory. */
const char *tern_plugin_default_dir(void);

/* snprintf whose truncation is intended: paths and plugin messages are cut
 * to the loader's buffers rather than refused. */
void tern_plugin_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
