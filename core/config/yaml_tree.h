/* core/config/yaml_tree.h: YAML text -> a tree of nodes (yaml_tree.c), and
 * the messages that point into it. */
#ifndef TERN_CORE_CONFIG_YAML_TREE_H
#define TERN_CORE_CONFIG_YAML_TREE_H

#include <stddef.h>

#include "config/cfg_internal.h"

void cfg_ynode_free(ynode *n);
/* Parse c->input into a tree (*root NULL for an empty stream). */
int cfg_yaml_to_tree(cfgctx *c, ynode **root);

/* One message, "ORIGIN:LINE:COL: PATH: ..." (control characters shown as ?). */
int cfg_err(cfgctx *c, int line, int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* "expected WHOSE (did you mean X? | ALL), got unknown key K". */
int cfg_unknown_key(cfgctx *c, const ynode *k, const char *path, const char *whose,
                    const char *const *names, size_t n, const char *all);

/* What the user wrote, in words: `9000`, `"abc"`, `null`, `a list`. */
const char *cfg_show(const ynode *n, char *buf, size_t len);
/* Printable, bounded rendering of user text (len >= 16). */
const char *cfg_show_text(const char *t, char *buf, size_t len);
/* "base.key" (or "key" at the root) and "base[i]", truncated to fit. */
void cfg_path_join(char *dst, size_t len, const char *base, const char *key);
void cfg_path_index(char *dst, size_t len, const char *base, size_t i);

#endif
