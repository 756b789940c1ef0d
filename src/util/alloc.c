/* util/alloc — the one host allocator hook; failure injection for tests. */
#include "util/util.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *default_alloc(void *user, void *ptr, size_t old_size, size_t new_size) {
    (void)user;
    (void)old_size;
    if (new_size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, new_size);
}

/* Process-wide, set before sessions are used (graft.h): plain globals, read
 * by every allocation on every thread and written only while no other thread
 * is inside graft. */
static gr_alloc_fn alloc_fn = default_alloc;
static void *alloc_user;
/* Counters for tests, shared by all threads: atomic, so sessions on several
 * threads keep gr_debug_live_allocs exact. Relaxed order: they are counts,
 * nothing is published through them. */
static atomic_long fail_countdown; /* >0: the allocation that brings it to 0 fails */
static atomic_long alloc_count;
static atomic_long live_allocs;

void gr_set_allocator(gr_alloc_fn fn, void *user) {
    alloc_fn = fn ? fn : default_alloc;
    alloc_user = fn ? user : NULL;
}

long gr_debug_fail_alloc_after(long n) {
    long made = atomic_exchange_explicit(&alloc_count, 0, memory_order_relaxed);
    atomic_store_explicit(&fail_countdown, n > 0 ? n : 0, memory_order_relaxed);
    return made;
}

long gr_debug_live_allocs(void) { return atomic_load_explicit(&live_allocs, memory_order_relaxed); }

/* Exactly one allocation fails per armed countdown, whichever thread makes it. */
static bool injected_failure(void) {
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    long left = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    while (left > 0)
        if (atomic_compare_exchange_weak_explicit(&fail_countdown, &left, left - 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return left == 1;
    return false;
}

void *gr_malloc(size_t n) {
    if (n == 0) n = 1;
    if (injected_failure()) {
        gr_nomem();
        return NULL;
    }
    void *p = alloc_fn(alloc_user, NULL, 0, n);
    if (!p) {
        gr_nomem();
        return NULL;
    }
    atomic_fetch_add_explicit(&live_allocs, 1, memory_order_relaxed);
    return p;
}

void *gr_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) {
        gr_nomem();
        return NULL;
    }
    void *p = gr_malloc(count * size);
    if (p) memset(p, 0, (count * size) != 0 ? count * size : 1);
    return p;
}

void *gr_realloc(void *p, size_t old_n, size_t new_n) {
    if (!p) return gr_malloc(new_n);
    if (new_n == 0) new_n = 1;
    if (injected_failure()) {
        gr_nomem();
        return NULL;
    }
    void *q = alloc_fn(alloc_user, p, old_n, new_n);
    if (!q) {
        gr_nomem();
        return NULL;
    }
    return q;
}

void gr_free(void *p, size_t n) {
    if (!p) return;
    atomic_fetch_sub_explicit(&live_allocs, 1, memory_order_relaxed);
    alloc_fn(alloc_user, p, n, 0);
}

char *gr_strndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *d = gr_malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = 0;
    return d;
}

char *gr_strdup(const char *s) { return s ? gr_strndup(s, strlen(s)) : NULL; }

void gr_strfree(char *s) {
    if (s) gr_free(s, strlen(s) + 1);
}

char *gr_sprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = gr_malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void gr_free_string(char *s) { gr_strfree(s); }

gr_status gr_vec_grow_(void **data, int *cap, int need, size_t elem) {
    if (need <= *cap) return GR_OK;
    int ncap = *cap ? *cap : 8;
    while (ncap < need) ncap *= 2;
    void *p = gr_realloc(*data, (size_t)*cap * elem, (size_t)ncap * elem);
    if (!p) return GR_ERR_NOMEM;
    *data = p;
    *cap = ncap;
    return GR_OK;
}

/* ---- string buffer ---------------------------------------------------------------- */
void gr_sb_init(gr_strbuf *sb) { memset(sb, 0, sizeof *sb); }

static bool sb_reserve(gr_strbuf *sb, size_t extra) {
    if (sb->failed) return false;
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap) return true;
    size_t ncap = sb->cap ? sb->cap : 256;
    while (ncap < need) ncap *= 2;
    char *p = gr_realloc(sb->data, sb->cap, ncap);
    if (!p) {
        sb->failed = true;
        return false;
    }
    sb->data = p;
    sb->cap = ncap;
    return true;
}

void gr_sb_printf(gr_strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(sb, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void gr_sb_puts(gr_strbuf *sb, const char *s) {
    size_t n = strlen(s);
    if (!sb_reserve(sb, n)) return;
    memcpy(sb->data + sb->len, s, n + 1);
    sb->len += n;
}

char *gr_sb_take(gr_strbuf *sb) {
    if (sb->failed || !sb_reserve(sb, 0)) {
        gr_sb_free(sb);
        gr_nomem();
        return NULL;
    }
    /* shrink to exact size so gr_strfree (which uses strlen+1) frees the right size */
    char *s = gr_strndup(sb->data, sb->len);
    gr_sb_free(sb);
    return s;
}

void gr_sb_free(gr_strbuf *sb) {
    gr_free(sb->data, sb->cap);
    memset(sb, 0, sizeof *sb);
}
