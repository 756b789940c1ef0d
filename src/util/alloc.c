/* util/alloc — the one host allocator hook; failure injection and free-size
 * checking for tests. */
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

/* ==== free-size checking ==================================================================
 * gr_free(p, n) and gr_realloc(p, old_n, ...) promise the size p was allocated with,
 * and the hook receives it (a custom allocator may rely on it). While checking is on,
 * each live allocation's size sits in an open-addressing table keyed by address
 * (linear probing, deletion by backward shift); a size that differs is reported on
 * stderr and counted. The table uses plain malloc: it must neither count as a graft
 * allocation nor fail through injection. One lock guards it (sessions may run on
 * several threads; this is a test facility, a spin lock is enough). Addresses
 * allocated before checking was turned on are unknown and not checked. */
typedef struct {
    void *ptr; /* NULL: empty slot */
    size_t size;
} size_rec;

static atomic_bool sizes_on;
static atomic_flag size_lock = ATOMIC_FLAG_INIT;
static size_rec *size_tab;          /* guarded by size_lock, like the two below */
static size_t size_cap, size_len;   /* cap is a power of two */
static atomic_long size_errors;

static void size_lock_take(void) {
    while (atomic_flag_test_and_set_explicit(&size_lock, memory_order_acquire)) {
    }
}
static void size_lock_give(void) { atomic_flag_clear_explicit(&size_lock, memory_order_release); }

static size_t size_slot(const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h & (size_cap - 1);
}

static void size_table_free(void) {
    free(size_tab);
    size_tab = NULL;
    size_cap = size_len = 0;
}

static void size_put(void *p, size_t n);

static bool size_grow(void) {
    size_rec *old = size_tab;
    size_t old_cap = size_cap, cap = size_cap ? size_cap * 2 : 1024;
    size_rec *tab = calloc(cap, sizeof *tab);
    if (!tab) return false;
    size_tab = tab;
    size_cap = cap;
    size_len = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].ptr) size_put(old[i].ptr, old[i].size);
    free(old);
    return true;
}

/* Under size_lock. */
static void size_put(void *p, size_t n) {
    if ((size_len + 1) * 2 > size_cap && !size_grow()) {
        fprintf(stderr, "graft: free-size check: out of memory for its table; checking turned off\n");
        atomic_store(&sizes_on, false);
        size_table_free();
        return;
    }
    size_t i = size_slot(p);
    while (size_tab[i].ptr && size_tab[i].ptr != p) i = (i + 1) & (size_cap - 1);
    if (!size_tab[i].ptr) size_len++;
    size_tab[i] = (size_rec){p, n};
}

/* Under size_lock. Removes p; its recorded size in *n. False when p is not in the table. */
static bool size_take(const void *p, size_t *n) {
    if (!size_cap) return false;
    size_t i = size_slot(p);
    while (size_tab[i].ptr != p) {
        if (!size_tab[i].ptr) return false;
        i = (i + 1) & (size_cap - 1);
    }
    *n = size_tab[i].size;
    /* backward shift: pull later entries of the probe run into the hole */
    size_t hole = i;
    for (size_t j = (i + 1) & (size_cap - 1); size_tab[j].ptr; j = (j + 1) & (size_cap - 1)) {
        size_t home = size_slot(size_tab[j].ptr);
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            size_tab[hole] = size_tab[j];
            hole = j;
        }
    }
    size_tab[hole].ptr = NULL;
    size_len--;
    return true;
}

static void size_record(void *p, size_t n) {
    size_lock_take();
    if (atomic_load(&sizes_on)) size_put(p, n);
    size_lock_give();
}

static void size_check(const void *p, size_t n, const char *what) {
    size_t had = 0;
    size_lock_take();
    bool known = atomic_load(&sizes_on) && size_take(p, &had);
    size_lock_give();
    /* a 0-byte request is a 1-byte block: freeing it with 0 or 1 is the same */
    if (!known || (had ? had : 1) == (n ? n : 1)) return;
    atomic_fetch_add(&size_errors, 1);
    fprintf(stderr, "graft: %s(%p, %zu): the block was allocated with %zu bytes\n", what, p, n, had);
}

void gr_debug_check_free_sizes(int on) {
    size_lock_take();
    size_table_free();
    atomic_store(&size_errors, 0);
    atomic_store(&sizes_on, on != 0);
    size_lock_give();
}

long gr_debug_free_size_errors(void) { return atomic_load(&size_errors); }

/* ==== the block cache of a plan build =======================================================
 * A new binding's plan build makes ~2000 small allocations and frees most of them before it
 * ends (lowering's and fusion's kernels, expression vectors, names, per-pass tables). glibc's
 * tcache keeps 7 blocks per size, so most of them went through _int_malloc / _int_free: about
 * 15% of the build's host instructions (callgrind, GPT-2 export, bench/compile-time). While a
 * scope is open on a thread (gr_alloc_cache_begin / _end, around gr_rt_plan_build), a freed
 * block of up to CACHE_MAX bytes goes onto this thread's free list of its size class and the
 * next request of that class takes it back. Callers pass the exact size to gr_free, so the
 * cache needs no header: with the default allocator every block of up to CACHE_MAX bytes is
 * requested rounded up to its class (CACHE_GRAIN), so any block of a class fits any request of
 * that class. Every request still counts, may fail by injection and moves live_allocs exactly
 * as before; the free-size check sees the caller's sizes. When the outermost scope closes,
 * the cached blocks go back to the hook. A user's allocator (gr_set_allocator) sees every
 * allocation and free as before: nothing is cached or rounded for it. Under ASan the cached
 * blocks are poisoned, so a use after gr_free is still reported. */
#define CACHE_GRAIN 16
#define CACHE_MAX 4096
#define CACHE_CLASSES (CACHE_MAX / CACHE_GRAIN + 1)
#define CACHE_HOLD_MAX ((size_t)8 << 20) /* bytes one thread may keep cached */

#if defined(__SANITIZE_ADDRESS__)
#define GR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GR_ASAN 1
#endif
#endif
#ifdef GR_ASAN
#include <sanitizer/asan_interface.h>
#define CACHE_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define CACHE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define CACHE_POISON(p, n) ((void)(p), (void)(n))
#define CACHE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct cache_block {
    struct cache_block *next;
} cache_block;

static _Thread_local struct {
    int depth;                        /* open scopes */
    size_t held;                      /* bytes on the lists */
    cache_block *list[CACHE_CLASSES]; /* by class: (size + GRAIN - 1) / GRAIN */
} tcache;

static inline size_t cache_class(size_t n) { return (n + CACHE_GRAIN - 1) / CACHE_GRAIN; }

/* What the hook is asked for: the class's full size for a small block with the default allocator. */
static inline size_t hook_size(size_t n) {
    return alloc_fn == default_alloc && n <= CACHE_MAX ? cache_class(n) * CACHE_GRAIN : n;
}

void gr_alloc_cache_begin(void) { tcache.depth++; }

void gr_alloc_cache_end(void) {
    if (tcache.depth <= 0 || --tcache.depth > 0) return;
    for (size_t c = 1; c < CACHE_CLASSES; c++) {
        cache_block *b = tcache.list[c];
        while (b) {
            CACHE_UNPOISON(b, c * CACHE_GRAIN);
            cache_block *next = b->next;
            alloc_fn(alloc_user, b, c * CACHE_GRAIN, 0);
            b = next;
        }
        tcache.list[c] = NULL;
    }
    tcache.held = 0;
}

static inline void *cache_take(size_t n) {
    if (tcache.depth <= 0 || n > CACHE_MAX || alloc_fn != default_alloc) return NULL;
    size_t c = cache_class(n);
    cache_block *b = tcache.list[c];
    if (!b) return NULL;
    CACHE_UNPOISON(b, c * CACHE_GRAIN);
    tcache.list[c] = b->next;
    tcache.held -= c * CACHE_GRAIN;
    return b;
}

static inline bool cache_put(void *p, size_t n) {
    if (tcache.depth <= 0 || n > CACHE_MAX || alloc_fn != default_alloc) return false;
    size_t c = cache_class(n);
    if (tcache.held + c * CACHE_GRAIN > CACHE_HOLD_MAX) return false;
    cache_block *b = p;
    b->next = tcache.list[c];
    tcache.list[c] = b;
    tcache.held += c * CACHE_GRAIN;
    CACHE_POISON(b, c * CACHE_GRAIN);
    return true;
}

/* ==== the allocator ========================================================================
 * A request for 0 bytes gets 1 (a distinct non-NULL block); callers still free it
 * with the size they asked for, and the hook sees the size it allocated. */
void *gr_malloc(size_t n) {
    if (injected_failure()) {
        gr_nomem();
        return NULL;
    }
    size_t want = n ? n : 1;
    void *p = cache_take(want);
    if (!p) p = alloc_fn(alloc_user, NULL, 0, hook_size(want));
    if (!p) {
        gr_nomem();
        return NULL;
    }
    atomic_fetch_add_explicit(&live_allocs, 1, memory_order_relaxed);
    if (atomic_load_explicit(&sizes_on, memory_order_relaxed)) size_record(p, n);
    return p;
}

void *gr_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) {
        gr_nomem();
        return NULL;
    }
    size_t n = count * size;
    if (n > CACHE_MAX && alloc_fn == default_alloc) {
        /* libc's calloc does not clear pages fresh from the kernel (a large block is mmapped):
         * the simulator's device memory, a plan's arena of hundreds of KB zeroed for every new
         * binding, was 8% of the plan build's instructions through malloc + memset */
        if (injected_failure()) {
            gr_nomem();
            return NULL;
        }
        void *p = calloc(1, n);
        if (!p) {
            gr_nomem();
            return NULL;
        }
        atomic_fetch_add_explicit(&live_allocs, 1, memory_order_relaxed);
        if (atomic_load_explicit(&sizes_on, memory_order_relaxed)) size_record(p, n);
        return p;
    }
    void *p = gr_malloc(count * size);
    if (p) memset(p, 0, (count * size) != 0 ? count * size : 1);
    return p;
}

void *gr_realloc(void *p, size_t old_n, size_t new_n) {
    if (!p) return gr_malloc(new_n);
    if (injected_failure()) {
        gr_nomem();
        return NULL;
    }
    bool checking = atomic_load_explicit(&sizes_on, memory_order_relaxed);
    if (checking) size_check(p, old_n, "gr_realloc");
    size_t old_hook = hook_size(old_n ? old_n : 1), new_hook = hook_size(new_n ? new_n : 1);
    /* the block already has the room of new_n's class: nothing to move */
    void *q = alloc_fn == default_alloc && old_hook == new_hook ? p : alloc_fn(alloc_user, p, old_hook, new_hook);
    if (!q) {
        if (checking) size_record(p, old_n); /* p stays allocated */
        gr_nomem();
        return NULL;
    }
    if (checking) size_record(q, new_n);
    return q;
}

void gr_free(void *p, size_t n) {
    if (!p) return;
    atomic_fetch_sub_explicit(&live_allocs, 1, memory_order_relaxed);
    if (atomic_load_explicit(&sizes_on, memory_order_relaxed)) size_check(p, n, "gr_free");
    size_t had = n ? n : 1;
    if (!cache_put(p, had)) alloc_fn(alloc_user, p, hook_size(had), 0);
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

char *gr_name_copy(char *dst, size_t cap, const char *src, long long n) {
    if (cap == 0) return dst;
    size_t at = 0;
    while (src && src[at] && at + 1 < cap) dst[at] = src[at], at++;
    if (n >= 0) {
        char digits[24];
        int nd = 0;
        unsigned long long u = (unsigned long long)n;
        do digits[nd++] = (char)('0' + u % 10), u /= 10;
        while (u && nd < (int)sizeof digits);
        while (nd > 0 && at + 1 < cap) dst[at++] = digits[--nd];
    }
    dst[at] = 0;
    return dst;
}

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

void gr_vec_shrink_(void **data, int *cap, int len, size_t elem) {
    if (*cap <= len || len <= 0) return; /* an empty vector keeps its room: freeing it is its owner's */
    void *p = gr_realloc(*data, (size_t)*cap * elem, (size_t)len * elem);
    if (!p) return; /* keeping the larger block is fine */
    *data = p;
    *cap = len;
}

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
