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

/* ---- escaping ------------------------------------------------------------------------ */
/* Length of the well-formed UTF-8 sequence at c (RFC 3629: no overlongs, surrogates or code
 * points past U+10FFFF), 0 when c does not start one. */
static int utf8_seq_len(const unsigned char *c) {
    unsigned char lo = 0x80, hi = 0xbf;
    int n;
    if (c[0] && c[0] < 0x80) return 1;
    if (c[0] >= 0xc2 && c[0] <= 0xdf) n = 2;
    else if (c[0] >= 0xe0 && c[0] <= 0xef) n = 3, lo = c[0] == 0xe0 ? 0xa0 : 0x80, hi = c[0] == 0xed ? 0x9f : 0xbf;
    else if (c[0] >= 0xf0 && c[0] <= 0xf4) n = 4, lo = c[0] == 0xf0 ? 0x90 : 0x80, hi = c[0] == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (c[1] < lo || c[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if ((c[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
    return n;
}

int gr_utf8_seq_len(const char *s) { return utf8_seq_len((const unsigned char *)s); }

size_t gr_escape_text(char *dst, size_t dst_size, const char *src, bool multiline) {
    static const char hex[] = "0123456789abcdef";
    size_t len = 0, written = 0;
    bool full = false; /* once a unit does not fit, nothing more is written: no cut escapes or characters */
    for (const unsigned char *c = (const unsigned char *)src; *c;) {
        char unit[8];
        int ulen = 0, n = *c < 0x80 ? 1 : utf8_seq_len(c);
        bool c1 = n == 2 && c[0] == 0xc2 && c[1] < 0xa0; /* U+0080..U+009F: C1 controls (CSI is U+009B) */
        bool ctl = n == 1 && (*c < 0x20 || *c == 0x7f) && !(multiline && (*c == '\n' || *c == '\t'));
        if (n == 0 || c1 || ctl) {
            n = c1 ? 2 : 1;
            for (int i = 0; i < n; i++) {
                unit[ulen++] = '\\';
                unit[ulen++] = 'x';
                unit[ulen++] = hex[c[i] >> 4];
                unit[ulen++] = hex[c[i] & 15];
            }
        } else {
            for (int i = 0; i < n; i++) unit[ulen++] = (char)c[i];
        }
        c += n;
        if (!full && len + (size_t)ulen < dst_size) memcpy(dst + len, unit, (size_t)ulen), written = len + (size_t)ulen;
        else full = true;
        len += (size_t)ulen;
    }
    if (dst_size) dst[written] = 0;
    return len;
}

/* ---- the last error --------------------------------------------------------------------- */
/* Every message is escaped on the way in: model-provided names reach it through %s. */
gr_status gr_errorv(gr_status st, const char *fmt, va_list ap) {
    char raw[GR_ERRMSG_MAX]; /* not last_error: an argument may be gr_last_error() itself */
    last_error_node = -1;
    vsnprintf(raw, sizeof raw, fmt, ap);
    gr_escape_text(last_error, sizeof last_error, raw, true);
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
    char raw[1024], old[GR_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    gr_escape_text(last_error, sizeof last_error - 3, raw, true);
    size_t plen = strlen(last_error);
    memcpy(last_error + plen, ": ", 3);
    /* old is escaped already (escaping it again changes nothing); when it has to be cut, the cut
     * must not leave half of one of its \xNN escapes at the end */
    char *tail = last_error + plen + 2;
    if (gr_escape_text(tail, sizeof last_error - plen - 2, old, true) >= sizeof last_error - plen - 2) {
        size_t len = strlen(tail);
        for (size_t i = 1; i <= 3 && i <= len; i++)
            if (tail[len - i] == '\\' && (i == 1 || tail[len - i + 1] == 'x')) {
                tail[len - i] = 0;
                break;
            }
    }
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
