/* util/error — the thread's last error message. */
#include "util/util.h"
#include <stdio.h>
#include <string.h>

#define GR_ERRMSG_MAX 4096
static _Thread_local char last_error[GR_ERRMSG_MAX];
static _Thread_local int last_error_node = -1;

void gr_error_set_node(int node) { last_error_node = node; }
int gr_error_node(void) { return last_error_node; }

const char *gr_last_error(void) { return last_error; }
void gr_error_clear(void) {
    last_error[0] = 0;
    last_error_node = -1;
}

gr_status gr_errorv(gr_status st, const char *fmt, va_list ap) {
    last_error_node = -1;
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return st;
}

gr_status gr_error(gr_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gr_errorv(st, fmt, ap);
    va_end(ap);
    return st;
}

gr_status gr_error_prefix(gr_status st, const char *fmt, ...) {
    char prefix[1024], old[GR_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t plen = strlen(prefix);
    if (plen > sizeof last_error - 3) plen = sizeof last_error - 3;
    memcpy(last_error, prefix, plen);
    memcpy(last_error + plen, ": ", 2);
    size_t room = sizeof last_error - plen - 3, olen = strnlen(old, room);
    memcpy(last_error + plen + 2, old, olen);
    last_error[plen + 2 + olen] = 0;
    return st;
}

/* Prepared in advance: formatting must not allocate when memory is gone. */
static const char nomem_message[] = "out of host memory";
gr_status gr_nomem(void) {
    memcpy(last_error, nomem_message, sizeof nomem_message);
    last_error_node = -1;
    return GR_ERR_NOMEM;
}

const char *gr_status_name(gr_status s) {
    switch (s) {
    case GR_OK: return "ok";
    case GR_ERR_INVALID: return "invalid";
    case GR_ERR_NOMEM: return "out of memory";
    case GR_ERR_IO: return "i/o error";
    case GR_ERR_PARSE: return "parse error";
    case GR_ERR_SHAPE: return "shape error";
    case GR_ERR_UNSUPPORTED: return "unsupported";
    case GR_ERR_DEVICE: return "device error";
    case GR_ERR_STALE: return "stale output";
    case GR_ERR_NOT_FOUND: return "not found";
    case GR_ERR_HAZARD: return "graph hazard";
    case GR_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
