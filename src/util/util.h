/* util — allocator hook, errors, growable arrays, dtype helpers, half floats.
 * Every layer includes this; it depends on nothing but graft.h and libc. */
#ifndef GR_UTIL_H
#define GR_UTIL_H

#include "graft.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- host memory: every allocation goes through here --------------------- */
void *gr_malloc(size_t n);            /* NULL on failure; sets GR_ERR_NOMEM message */
void *gr_calloc(size_t count, size_t size);
void *gr_realloc(void *p, size_t old_n, size_t new_n); /* NULL on failure, p unchanged */
void gr_free(void *p, size_t n);       /* n = the size given at allocation, exactly (checked in tests) */
char *gr_strdup(const char *s);
/* A scope of this thread in which freed small blocks are kept for its next allocations
 * (alloc.c, "the block cache of a plan build"); scopes nest, and the outermost end gives the
 * kept blocks back. Allocation counting and failure injection are unchanged. */
void gr_alloc_cache_begin(void);
void gr_alloc_cache_end(void);
char *gr_strndup(const char *s, size_t n);
void gr_strfree(char *s);             /* frees a string from gr_strdup / gr_strndup / gr_sprintf */
char *gr_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Copies src into dst[cap] (truncating, always terminated); then, when n >= 0, appends the
 * decimal n (truncated likewise). For names built on hot paths, where snprintf's cost showed
 * (kernel and parameter names of every plan). Returns dst. */
char *gr_name_copy(char *dst, size_t cap, const char *src, long long n);

/* ---- errors -------------------------------------------------------------------
 * gr_error sets the thread's last error and returns the status, so a failure
 * path reads: `return gr_error(GR_ERR_SHAPE, "node %s: ...", name);` */
gr_status gr_error(gr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
gr_status gr_errorv(gr_status st, const char *fmt, va_list ap);
/* Prefixes the current message with context ("while loading x.gir: ...").
 * Returns st unchanged. */
gr_status gr_error_prefix(gr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gr_error_clear(void);
/* Copies src to dst (dst_size bytes, always NUL-terminated when dst_size > 0) with every byte a
 * terminal could act on written as \xNN: C0 controls (except '\n' and '\t' when multiline),
 * DEL, UTF-8-encoded C1 controls (U+0080..U+009F) and bytes that are not valid UTF-8. Valid
 * UTF-8 text otherwise passes unchanged, and escaping escaped text changes nothing. Returns the
 * length the escaped text needs (excluding the NUL), like snprintf. gr_error applies it to every
 * message, so names from a model cannot send escape sequences to a terminal. */
size_t gr_escape_text(char *dst, size_t dst_size, const char *src, bool multiline);
/* Length of the well-formed UTF-8 sequence starting at s (1..4), 0 when s does not start one
 * (s must be NUL-terminated; the NUL itself is not a sequence). */
int gr_utf8_seq_len(const char *s);
gr_status gr_nomem(void); /* prepared out-of-memory message */
/* The IR node (an index into the graph being run) that the last error is
 * about, or -1. Layers below the IR that know a node only by number (a
 * kernel's gather bounds check) set it after gr_error, so the runtime can name
 * the user's node even when the failing access was fused into another node's
 * kernel. gr_error, gr_errorv and gr_nomem reset it; gr_error_prefix keeps it. */
void gr_error_set_node(int node);
int gr_error_node(void);

#define GR_TRY(expr)                               \
    do {                                           \
        gr_status gr_try_st_ = (expr);             \
        if (gr_try_st_ != GR_OK) return gr_try_st_; \
    } while (0)

/* ---- growable arrays ------------------------------------------------------------
 * struct { T *data; int len, cap; } — gr_vec_push returns GR_ERR_NOMEM on failure. */
#define GR_VEC(T) struct { T *data; int len, cap; }
gr_status gr_vec_grow_(void **data, int *cap, int need, size_t elem);
#define gr_vec_reserve(v, n) gr_vec_grow_((void **)&(v)->data, &(v)->cap, (n), sizeof(*(v)->data))
/* Gives back the room beyond len (a vector kept for long after it was built). */
#define gr_vec_shrink(v) gr_vec_shrink_((void **)&(v)->data, &(v)->cap, (v)->len, sizeof(*(v)->data))
void gr_vec_shrink_(void **data, int *cap, int len, size_t elem);
#define gr_vec_push(v, x) \
    (gr_vec_reserve((v), (v)->len + 1) != GR_OK ? GR_ERR_NOMEM : ((v)->data[(v)->len++] = (x), GR_OK))
#define gr_vec_free(v) (gr_free((v)->data, (size_t)(v)->cap * sizeof(*(v)->data)), (v)->data = NULL, (v)->len = (v)->cap = 0)

/* growable string buffer */
typedef struct {
    char *data;
    size_t len, cap;
    bool failed; /* an append ran out of memory */
} gr_strbuf;
void gr_sb_init(gr_strbuf *sb);
void gr_sb_printf(gr_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gr_sb_puts(gr_strbuf *sb, const char *s);
/* Takes the string out (caller frees with gr_strfree); NULL + GR_ERR_NOMEM if any append failed. */
char *gr_sb_take(gr_strbuf *sb);
void gr_sb_free(gr_strbuf *sb);

/* ---- dtypes ------------------------------------------------------------------------ */
bool gr_dtype_is_float(gr_dtype t);
bool gr_dtype_is_int(gr_dtype t); /* signed or unsigned integer, not bool */

/* half / bfloat16 conversion (round to nearest even) */
float gr_half_to_f32(uint16_t h);
uint16_t gr_f32_to_half(float f);
float gr_bf16_to_f32(uint16_t h);
uint16_t gr_f32_to_bf16(float f);
/* Reads element i of a typed buffer as double / writes it (with the dtype's rounding). */
double gr_load_f64(const void *buf, gr_dtype t, int64_t i);
int64_t gr_load_i64(const void *buf, gr_dtype t, int64_t i);
void gr_store_f64(void *buf, gr_dtype t, int64_t i, double v);
void gr_store_i64(void *buf, gr_dtype t, int64_t i, int64_t v);

/* ---- checked arithmetic for sizes ----------------------------------------------------
 * GR_MAX_NUMEL bounds the element count of every tensor graft handles (inputs,
 * constants, every inferred shape, lowering temporaries, bound inputs). The
 * bound applies to the product of the non-zero dims, so a zero-size tensor
 * cannot hide huge dims; every partial product of dims, every row-major
 * stride and every byte count (numel * dtype size <= 2^43) then fits in
 * int64_t and size_t without further checks. */
#define GR_MAX_NUMEL ((int64_t)1 << 40)
/* a * b and a + b into *out; true when the exact result does not fit (as __builtin_*_overflow). */
static inline bool gr_mul_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline bool gr_add_overflow(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }
/* Element count of dims (each >= 0) into *numel; false when a dim is negative
 * or the product of the non-zero dims exceeds GR_MAX_NUMEL. */
bool gr_shape_numel_checked(int ndim, const int64_t *dims, int64_t *numel);

/* ---- misc ---------------------------------------------------------------------------- */
uint64_t gr_hash_bytes(const void *p, size_t n, uint64_t seed); /* FNV-1a 64 */
int64_t gr_shape_numel(int ndim, const int64_t *dims); /* unchecked: for shapes already within GR_MAX_NUMEL */
/* Reads a whole regular file (as gr_open_regular); the buffer is NUL-terminated (n excludes the NUL).
 * The read is bounded by the size fstat reports. */
gr_status gr_read_file(const char *path, char **out, size_t *out_n);
/* Opens an existing file for reading only when it is a regular file: O_NONBLOCK so that a FIFO
 * cannot block the open, then fstat refuses a FIFO, directory, device or socket by name. Every
 * file graft reads goes through here. Returns the descriptor (close it) and the size in bytes. */
gr_status gr_open_regular(const char *path, int *out_fd, uint64_t *out_size);
/* Reads exactly n bytes at offset (pread); GR_ERR_IO naming path on a short read. */
gr_status gr_read_at(int fd, const char *path, void *dst, size_t n, uint64_t offset);
double gr_now_us(void); /* monotonic wall clock */

#define GR_ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define GR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GR_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
