/* tern: error codes shared by the core, the application API and every plugin.
 *
 * Every function that can fail returns 0 (or a non-negative count) on success
 * and one of these negative codes on failure.  The text that says what went
 * wrong and what to check travels separately: the engine's last-error message
 * (tern_engine_last_error) or a plugin's `err` buffer.  Codes are append-only:
 * a value, once published, keeps its meaning.
 */
#ifndef TERN_ERRORS_H
#define TERN_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tern_err {
    TERN_OK = 0,
    TERN_ERR_INVAL = -1,          /* an argument is out of range or malformed */
    TERN_ERR_NOMEM = -2,          /* allocation failed */
    TERN_ERR_CONFIG = -3,         /* the configuration is invalid */
    TERN_ERR_PLUGIN = -4,         /* a plugin failed to load or to initialise */
    TERN_ERR_NOT_FOUND = -5,      /* no such segment, key, buffer or device */
    TERN_ERR_EXISTS = -6,         /* already there (e.g. overlapping registration) */
    TERN_ERR_NOT_SUPPORTED = -7,  /* an optional operation a plugin left out */
    TERN_ERR_IO = -8,             /* a system call failed (see the message) */
    TERN_ERR_TIMEOUT = -9,        /* a deadline passed */
    TERN_ERR_PROTOCOL = -10,      /* a peer sent a malformed frame or descriptor */
    TERN_ERR_REFUSED = -11,       /* a peer refused (reply_msg, auth, bad address) */
    TERN_ERR_CONNECT = -12,       /* could not connect to a peer */
    TERN_ERR_BUSY = -13,          /* in use (e.g. freeing a batch with work in flight) */
    TERN_ERR_NO_TRANSPORT = -14,  /* no transport shared with a peer */
    TERN_ERR_ABI = -15,           /* a plugin built for another ABI */
    TERN_ERR_DEVICE = -16,        /* a device failed (QP, CQ, endpoint error) */
    TERN_ERR_AUTH = -17,          /* authentication failed */
    TERN_ERR_CANCELED = -18,      /* the operation was canceled */
    TERN_ERR_RANGE = -19,         /* an address is outside registered memory */
    TERN_ERR_CLOSED = -20,        /* the peer or the engine went away */
    TERN_ERR_UNREACHABLE = -21,   /* this transport cannot reach that peer at all
                                     (another host, namespace or fabric): the
                                     core tries the next common transport */
} tern_err;

/* A short, static, never-NULL name for a code ("TERN_ERR_INVAL"). */
const char *tern_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif
