/* tools/ephemeral_name.h: the server name a tool's own engine takes. */
#ifndef TERN_TOOLS_EPHEMERAL_NAME_H
#define TERN_TOOLS_EPHEMERAL_NAME_H

#include <stdio.h>
#include <string.h>

/* "<configured host>:0": a free port on the configured host, so the tool's
 * engine runs beside an engine that holds the configured port.  "[v6]"
 * brackets are kept. */
static inline void tool_ephemeral_name(const char *server_name, char *out, size_t outlen)
{
    const char *sn = server_name ? server_name : "127.0.0.1:12001";
    const char *colon = strrchr(sn, ':');
    int hl = colon ? (int)(colon - sn) : (int)strlen(sn);
    snprintf(out, outlen, "%.*s:0", hl, sn);
}

#endif
