/* core/base/errors.c: names for tern_err codes. */
#include "tern/errors.h"

#define TERN_EXPORT __attribute__((visibility("default")))

TERN_EXPORT const char *tern_strerror(int code)
{
    switch (code) {
    case TERN_OK: return "TERN_OK";
    case TERN_ERR_INVAL: return "TERN_ERR_INVAL";
    case TERN_ERR_NOMEM: return "TERN_ERR_NOMEM";
    case TERN_ERR_CONFIG: return "TERN_ERR_CONFIG";
    case TERN_ERR_PLUGIN: return "TERN_ERR_PLUGIN";
    case TERN_ERR_NOT_FOUND: return "TERN_ERR_NOT_FOUND";
    case TERN_ERR_EXISTS: return "TERN_ERR_EXISTS";
    case TERN_ERR_NOT_SUPPORTED: return "TERN_ERR_NOT_SUPPORTED";
    case TERN_ERR_IO: return "TERN_ERR_IO";
    case TERN_ERR_TIMEOUT: return "TERN_ERR_TIMEOUT";
    case TERN_ERR_PROTOCOL: return "TERN_ERR_PROTOCOL";
    case TERN_ERR_REFUSED: return "TERN_ERR_REFUSED";
    case TERN_ERR_CONNECT: return "TERN_ERR_CONNECT";
    case TERN_ERR_BUSY: return "TERN_ERR_BUSY";
    case TERN_ERR_NO_TRANSPORT: return "TERN_ERR_NO_TRANSPORT";
    case TERN_ERR_ABI: return "TERN_ERR_ABI";
    case TERN_ERR_DEVICE: return "TERN_ERR_DEVICE";
    case TERN_ERR_AUTH: return "TERN_ERR_AUTH";
    case TERN_ERR_CANCELED: return "TERN_ERR_CANCELED";
    case TERN_ERR_RANGE: return "TERN_ERR_RANGE";
    case TERN_ERR_CLOSED: return "TERN_ERR_CLOSED";
    case TERN_ERR_UNREACHABLE: return "TERN_ERR_UNREACHABLE";
    }
    return "TERN_ERR_UNKNOWN";
}
