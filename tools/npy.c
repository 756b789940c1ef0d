/* tools/npy — reading and writing NumPy .npy files (see npy.h).
 *
 * The header is a Python dict literal, e.g.
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * parsed here by a small recursive-descent reader that accepts exactly the
 * literals NumPy writes (strings, True/False, tuples of integers) and reports
 * anything else with the byte offset inside the header. */
#include "npy.h"
#include "util/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ---- dtypes ------------------------------------------------------------------ */
static const struct {
    char kind;      /* f i u b */
    int size;
    gr_dtype dtype;
} npy_types[] = {
    {'f', 4, GR_F32}, {'f', 2, GR_F16}, {'f', 8, GR_F64}, {'i', 8, GR_I64},
    {'i', 4, GR_I32}, {'i', 1, GR_I8},  {'u', 1, GR_U8},  {'b', 1, GR_BOOL},
};

const char *npy_descr(gr_dtype dtype) {
    switch (dtype) {
    case GR_F32: return "<f4";
    case GR_F16: return "<f2";
    case GR_F64: return "<f8";
    case GR_I64: return "<i8";
    case GR_I32: return "<i4";
    case GR_I8: return "|i1";
    case GR_U8: return "|u1";
    case GR_BOOL: return "|b1";
    default: return NULL;
    }
}

static int npy_fail(char *err, const char *origin, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int npy_fail(char *err, const char *origin, const char *fmt, ...) {
    size_t len = strlen(origin);
    if (len > NPY_ERR_LEN / 2) len = NPY_ERR_LEN / 2;
    memcpy(err, origin, len);
    memcpy(err + len, ": ", 3);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + len + 2, NPY_ERR_LEN - len - 2, fmt, ap);
    va_end(ap);
    return -1;
}

/* The library's message (gr_open_regular, gr_read_at) names the file already. */
static int npy_lib_fail(char *err) {
    snprintf(err, NPY_ERR_LEN, "%s", gr_last_error());
    return -1;
}

/* Maps a descr string to a dtype; 0 ok, -1 with message. */
static int descr_to_dtype(const char *descr, const char *origin, gr_dtype *out, char *err) {
    size_t n = strlen(descr);
    if (n < 3 || n > 4)
        return npy_fail(err, origin, "unsupported dtype descr '%s' (supported: <f4 <f2 <f8 <i8 <i4 |i1 |u1 |b1)", descr);
    char order = descr[0], kind = descr[1];
    char *end = NULL;
    long size = strtol(descr + 2, &end, 10);
    if (*end || size <= 0 || !strchr("<>|=", order))
        return npy_fail(err, origin, "unsupported dtype descr '%s' (supported: <f4 <f2 <f8 <i8 <i4 |i1 |u1 |b1)", descr);
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
        if (npy_types[i].kind != kind || npy_types[i].size != size) continue;
        if (order == '>' && size > 1)
            return npy_fail(err, origin, "big-endian data ('%s') is not supported; convert with "
                                         "a.astype(a.dtype.newbyteorder('<'))", descr);
        *out = npy_types[i].dtype;
        return 0;
    }
    return npy_fail(err, origin, "unsupported dtype descr '%s' (supported: <f4 <f2 <f8 <i8 <i4 |i1 |u1 |b1)", descr);
}

/* ---- header dict parser -------------------------------------------------------- */
typedef struct {
    const char *s;
    size_t n, pos;
    const char *origin;
    char *err;
} hdr_parser;

static void hp_skip_ws(hdr_parser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                             p->s[p->pos] == '\r'))
        p->pos++;
}

static int hp_fail(hdr_parser *p, const char *what) {
    return npy_fail(p->err, p->origin, "malformed header at byte %zu of the header dict: %s", p->pos, what);
}

static int hp_expect(hdr_parser *p, char c, const char *what) {
    hp_skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != c) return hp_fail(p, what);
    p->pos++;
    return 0;
}

/* Python string literal in ' or " quotes, no escapes (NumPy writes none). */
static int hp_string(hdr_parser *p, char *out, size_t out_len) {
    hp_skip_ws(p);
    if (p->pos >= p->n || (p->s[p->pos] != '\'' && p->s[p->pos] != '"')) return hp_fail(p, "expected a string");
    char q = p->s[p->pos++];
    size_t start = p->pos;
    while (p->pos < p->n && p->s[p->pos] != q) {
        if (p->s[p->pos] == '\\' || p->s[p->pos] == '\n') return hp_fail(p, "unsupported character in string");
        p->pos++;
    }
    if (p->pos >= p->n) return hp_fail(p, "unterminated string");
    size_t len = p->pos - start;
    p->pos++;
    if (len + 1 > out_len) return hp_fail(p, "string too long");
    memcpy(out, p->s + start, len);
    out[len] = 0;
    return 0;
}

static bool hp_word(hdr_parser *p, const char *w) {
    size_t len = strlen(w);
    if (p->n - p->pos < len || memcmp(p->s + p->pos, w, len) != 0) return false;
    char after = p->pos + len < p->n ? p->s[p->pos + len] : 0;
    if ((after >= 'A' && after <= 'Z') || (after >= 'a' && after <= 'z') || (after >= '0' && after <= '9') ||
        after == '_')
        return false;
    p->pos += len;
    return true;
}

#define NPY_DIM_LIMIT ((int64_t)1 << 62)

/* (d0, d1, ...) — also accepts [..] */
static int hp_shape(hdr_parser *p, int *ndim, int64_t *dims) {
    hp_skip_ws(p);
    if (p->pos >= p->n || (p->s[p->pos] != '(' && p->s[p->pos] != '['))
        return hp_fail(p, "'shape' must be a tuple of integers");
    char close = p->s[p->pos] == '(' ? ')' : ']';
    p->pos++;
    *ndim = 0;
    for (;;) {
        hp_skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        if (p->pos >= p->n) return hp_fail(p, "unterminated shape tuple");
        if (p->s[p->pos] == '-') return hp_fail(p, "negative dimension in shape");
        if (p->s[p->pos] < '0' || p->s[p->pos] > '9') return hp_fail(p, "'shape' must be a tuple of integers");
        int64_t v = 0;
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            if (v > (NPY_DIM_LIMIT - 9) / 10)
                return npy_fail(p->err, p->origin, "dimension in shape is too large (overflow)");
            v = v * 10 + (p->s[p->pos] - '0');
            p->pos++;
        }
        if (p->pos < p->n && p->s[p->pos] == 'L') p->pos++; /* Python 2 long */
        if (*ndim >= GR_MAX_DIMS)
            return npy_fail(p->err, p->origin, "shape has more than %d dimensions", GR_MAX_DIMS);
        dims[(*ndim)++] = v;
        hp_skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == close) continue;
        return hp_fail(p, "expected ',' or the end of the shape tuple");
    }
}

static int parse_header(const char *s, size_t n, const char *origin, npy_array *out, char *err) {
    hdr_parser p = {.s = s, .n = n, .pos = 0, .origin = origin, .err = err};
    char descr[64] = {0};
    bool have_descr = false, have_order = false, have_shape = false, fortran = false;
    if (hp_expect(&p, '{', "the header is not a dict (expected '{')")) return -1;
    for (;;) {
        hp_skip_ws(&p);
        if (p.pos < p.n && p.s[p.pos] == '}') {
            p.pos++;
            break;
        }
        char key[64];
        if (hp_string(&p, key, sizeof key)) return -1;
        if (hp_expect(&p, ':', "expected ':' after a key")) return -1;
        hp_skip_ws(&p);
        if (!strcmp(key, "descr")) {
            if (have_descr) return hp_fail(&p, "duplicate key 'descr'");
            if (p.pos < p.n && (p.s[p.pos] == '[' || p.s[p.pos] == '('))
                return npy_fail(err, origin, "structured dtypes are not supported");
            if (hp_string(&p, descr, sizeof descr)) return -1;
            have_descr = true;
        } else if (!strcmp(key, "fortran_order")) {
            if (have_order) return hp_fail(&p, "duplicate key 'fortran_order'");
            if (hp_word(&p, "True")) fortran = true;
            else if (hp_word(&p, "False")) fortran = false;
            else return hp_fail(&p, "'fortran_order' must be True or False");
            have_order = true;
        } else if (!strcmp(key, "shape")) {
            if (have_shape) return hp_fail(&p, "duplicate key 'shape'");
            if (hp_shape(&p, &out->ndim, out->dims)) return -1;
            have_shape = true;
        } else {
            return npy_fail(err, origin, "malformed header: unexpected key '%s'", key);
        }
        hp_skip_ws(&p);
        if (p.pos < p.n && p.s[p.pos] == ',') {
            p.pos++;
            continue;
        }
        if (p.pos < p.n && p.s[p.pos] == '}') continue;
        return hp_fail(&p, "expected ',' or '}'");
    }
    hp_skip_ws(&p);
    if (p.pos != p.n) return hp_fail(&p, "unexpected text after the header dict");
    if (!have_descr || !have_order || !have_shape)
        return npy_fail(err, origin, "malformed header: missing key '%s'",
                        !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    if (fortran)
        return npy_fail(err, origin, "fortran_order=True is not supported (save a C-contiguous array: "
                                     "np.save(f, np.ascontiguousarray(a)))");
    return descr_to_dtype(descr, origin, &out->dtype, err);
}

/* ---- reading ------------------------------------------------------------------------ */
/* NumPy itself refuses headers past 10000 bytes unless told otherwise; graft's dtypes and at
 * most 8 dims need far less. Bounding it bounds what a hostile header can make graft read. */
#define NPY_HEADER_MAX 65536

static uint32_t rd_le(const unsigned char *b, int n) {
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

/* Magic, version and header length from the first bytes (n of them, at most 12 needed). */
static int parse_prefix(const unsigned char *buf, size_t n, uint64_t file_size, const char *origin, size_t *prefix,
                        size_t *hlen, char *err) {
    if (n < 8 || memcmp(buf, npy_magic, 6) != 0)
        return npy_fail(err, origin, "not a .npy file (bad magic; expected \\x93NUMPY)");
    int major = buf[6], minor = buf[7];
    if (major == 1) *prefix = 10;
    else if (major == 2 || major == 3) *prefix = 12;
    else return npy_fail(err, origin, "unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor);
    if (minor != 0)
        return npy_fail(err, origin, "unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor);
    if (n < *prefix) return npy_fail(err, origin, "truncated header (file has %zu bytes)", n);
    *hlen = rd_le(buf + 8, major == 1 ? 2 : 4);
    if (*hlen > file_size - *prefix)
        return npy_fail(err, origin, "truncated header: it declares %zu bytes, the file has %llu after the prefix", *hlen,
                        (unsigned long long)(file_size - *prefix));
    if (*hlen > NPY_HEADER_MAX)
        return npy_fail(err, origin, "header of %zu bytes is larger than graft reads (%d)", *hlen, NPY_HEADER_MAX);
    return 0;
}

/* Bytes of data the header promises. The element count is held to graft's one size limit
 * (gr_shape_numel_checked: the non-zero dims' product at most GR_MAX_NUMEL, so a 0 dim cannot
 * hide huge ones); the byte count then fits size_t without further checks. */
static int data_bytes(const npy_array *a, const char *origin, size_t *out, char *err) {
    int64_t numel;
    if (!gr_shape_numel_checked(a->ndim, a->dims, &numel))
        return npy_fail(err, origin, "shape is too large: its element count overflows graft's limit of %lld elements",
                        (long long)GR_MAX_NUMEL);
    *out = (size_t)numel * gr_dtype_size(a->dtype);
    return 0;
}

/* The data must fill the file exactly: fewer bytes is truncation, more is something the
 * header does not describe (a second array appended, a wrong shape). */
static int check_data_size(size_t nbytes, uint64_t avail, const char *origin, char *err) {
    if (avail < nbytes)
        return npy_fail(err, origin, "data truncated: the shape needs %zu bytes, the file has %llu", nbytes,
                        (unsigned long long)avail);
    if (avail > nbytes)
        return npy_fail(err, origin, "the file has %llu bytes of data, its header's shape describes %zu",
                        (unsigned long long)avail, nbytes);
    return 0;
}

int npy_parse(const unsigned char *buf, size_t n, const char *origin, npy_array *out, char *err) {
    memset(out, 0, sizeof *out);
    npy_array a = {0};
    size_t prefix = 0, hlen = 0, nbytes = 0;
    if (parse_prefix(buf, n, n, origin, &prefix, &hlen, err)) return -1;
    if (parse_header((const char *)buf + prefix, hlen, origin, &a, err)) return -1;
    if (data_bytes(&a, origin, &nbytes, err) || check_data_size(nbytes, n - prefix - hlen, origin, err)) return -1;
    if (nbytes) {
        a.data = malloc(nbytes);
        if (!a.data) return npy_fail(err, origin, "out of memory (%zu bytes)", nbytes);
        memcpy(a.data, buf + prefix + hlen, nbytes);
    }
    a.nbytes = nbytes;
    *out = a;
    return 0;
}

/* Reads no more than the header promises and the file holds: a FIFO, a device (/dev/zero) or a
 * directory is refused before anything is read (gr_open_regular), and the data must fill the
 * file exactly as fstat measured it. */
int npy_read(const char *path, npy_array *out, char *err) {
    memset(out, 0, sizeof *out);
    int fd;
    uint64_t size;
    if (gr_open_regular(path, &fd, &size) != GR_OK) return npy_lib_fail(err);
    npy_array a = {0};
    unsigned char head[12];
    char *header = NULL;
    size_t got = size < sizeof head ? (size_t)size : sizeof head, prefix = 0, hlen = 0, nbytes = 0;
    int rc = -1;
    if (gr_read_at(fd, path, head, got, 0) != GR_OK) {
        npy_lib_fail(err);
        goto done;
    }
    if (parse_prefix(head, got, size, path, &prefix, &hlen, err)) goto done;
    if (!(header = malloc(hlen ? hlen : 1))) {
        npy_fail(err, path, "out of memory");
        goto done;
    }
    if (gr_read_at(fd, path, header, hlen, prefix) != GR_OK) {
        npy_lib_fail(err);
        goto done;
    }
    if (parse_header(header, hlen, path, &a, err) || data_bytes(&a, path, &nbytes, err) ||
        check_data_size(nbytes, size - prefix - hlen, path, err))
        goto done;
    if (nbytes && !(a.data = malloc(nbytes))) {
        npy_fail(err, path, "out of memory (%zu bytes)", nbytes);
        goto done;
    }
    if (nbytes && gr_read_at(fd, path, a.data, nbytes, prefix + hlen) != GR_OK) {
        npy_lib_fail(err);
        goto done;
    }
    rc = 0;
done:
    close(fd);
    free(header);
    if (rc) {
        free(a.data);
        return -1;
    }
    a.nbytes = nbytes;
    *out = a;
    return 0;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- writing ------------------------------------------------------------------------ */
int npy_write(const char *path, gr_dtype dtype, int ndim, const int64_t *dims, const void *data, size_t nbytes,
              char *err) {
    const char *descr = npy_descr(dtype);
    if (!descr) return npy_fail(err, path, "dtype %s cannot be written as .npy", gr_dtype_name(dtype));
    if (ndim < 0 || ndim > GR_MAX_DIMS) return npy_fail(err, path, "bad rank %d", ndim);
    char dict[512];
    int pos = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t expect = gr_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        pos += snprintf(dict + pos, sizeof dict - (size_t)pos, "%lld%s", (long long)dims[i],
                        ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        expect *= (size_t)dims[i];
    }
    pos += snprintf(dict + pos, sizeof dict - (size_t)pos, "), }");
    if (expect != nbytes)
        return npy_fail(err, path, "internal: %zu bytes given for a shape of %zu bytes", nbytes, expect);
    /* pad with spaces so that prefix + header is a multiple of 64, ending in '\n' */
    size_t total = 10 + (size_t)pos + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t hlen = padded - 10;
    unsigned char head[640];
    memcpy(head, npy_magic, 6);
    head[6] = 1;
    head[7] = 0;
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    memcpy(head + 10, dict, (size_t)pos);
    memset(head + 10 + pos, ' ', hlen - (size_t)pos - 1);
    head[padded - 1] = '\n';

    FILE *f = fopen(path, "wb");
    if (!f) return npy_fail(err, path, "cannot create: %s", strerror(errno));
    bool ok = fwrite(head, 1, padded, f) == padded;
    if (ok && nbytes) ok = fwrite(data, 1, nbytes, f) == nbytes;
    if (fclose(f) != 0) ok = false;
    if (!ok) return npy_fail(err, path, "write failed: %s", strerror(errno));
    return 0;
}
