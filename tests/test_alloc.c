/* tests/test_alloc — the host allocator hook: the sizes it is given are exact
 * (gr_free / gr_realloc pass the size a block was allocated with), and the
 * free-size check that every C test runs (check.h) catches a wrong one. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "util/util.h"

/* ---- a hook that keeps its own books from the sizes it is told ---- */
static long hook_bytes, hook_blocks;
static void *counting_alloc(void *user, void *ptr, size_t old_size, size_t new_size) {
    (void)user;
    if (ptr) hook_bytes -= (long)old_size;
    if (new_size == 0) {
        hook_blocks--;
        free(ptr);
        return NULL;
    }
    if (!ptr) hook_blocks++;
    void *q = realloc(ptr, new_size);
    if (q) hook_bytes += (long)new_size;
    else if (ptr) hook_bytes += (long)old_size;
    return q;
}

static void test_wrong_sizes_are_caught(void) {
    gr_debug_check_free_sizes(1);
    void *p = gr_malloc(24);
    gr_free(p, 24);
    CHECK(gr_debug_free_size_errors() == 0);
    p = gr_malloc(24);
    gr_free(p, 0); /* "size unknown" is a wrong size */
    CHECK(gr_debug_free_size_errors() == 1);
    p = gr_calloc(3, 8);
    gr_free(p, 23);
    CHECK(gr_debug_free_size_errors() == 2);
    /* realloc promises the old size too, and the new one is what a free must pass */
    p = gr_malloc(10);
    p = gr_realloc(p, 11, 40);
    CHECK(gr_debug_free_size_errors() == 3);
    gr_free(p, 10);
    CHECK(gr_debug_free_size_errors() == 4);
    p = gr_malloc(10);
    p = gr_realloc(p, 10, 40);
    gr_free(p, 40);
    CHECK(gr_debug_free_size_errors() == 4);
    /* a 0-byte request is a 1-byte block */
    p = gr_malloc(0);
    CHECK(p != NULL);
    gr_free(p, 0);
    p = gr_calloc(0, 16);
    gr_free(p, 1);
    CHECK(gr_debug_free_size_errors() == 4);
    /* turning it on again starts a fresh count (the tests below expect none) */
    gr_debug_check_free_sizes(1);
    CHECK(gr_debug_free_size_errors() == 0);
}

/* Many live blocks freed in a shuffled order: the table grows and deletes
 * without losing or confusing entries; one wrong size among them is found. */
static void test_many_blocks(void) {
    enum { N = 5000 };
    void **blocks = calloc(N, sizeof *blocks);
    int *order = calloc(N, sizeof *order);
    if (!blocks || !order) {
        CHECK(0);
        free(blocks);
        free(order);
        return;
    }
    gr_debug_check_free_sizes(1);
    for (int i = 0; i < N; i++) blocks[i] = gr_malloc((size_t)(i % 97) + 1);
    for (int i = 0; i < N; i++) order[i] = i;
    unsigned seed = 12345;
    for (int i = N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int wrong = order[N / 2];
    for (int k = 0; k < N; k++) {
        int i = order[k];
        gr_free(blocks[i], (size_t)(i % 97) + 1 + (i == wrong));
    }
    CHECK_MSG(gr_debug_free_size_errors() == 1, "%ld wrong sizes reported, 1 made", gr_debug_free_size_errors());
    gr_debug_check_free_sizes(1);
    free(blocks);
    free(order);
}

/* Strings, string buffers and growable arrays free with the sizes they were made with. */
static void test_helpers_free_exact_sizes(void) {
    gr_debug_check_free_sizes(1);
    char *s = gr_strdup("graft");
    gr_strfree(s);
    s = gr_strndup("graft and more", 5);
    CHECK(s && !strcmp(s, "graft"));
    gr_strfree(s);
    s = gr_sprintf("%s-%d", "x", 42);
    gr_strfree(s);
    gr_strbuf sb;
    gr_sb_init(&sb);
    for (int i = 0; i < 100; i++) gr_sb_printf(&sb, "%d,", i);
    s = gr_sb_take(&sb);
    CHECK(s && !strncmp(s, "0,1,2,", 6));
    gr_strfree(s);
    GR_VEC(int) v = {0};
    for (int i = 0; i < 1000; i++) CHECK_OK(gr_vec_push(&v, i));
    gr_vec_free(&v);
    CHECK_MSG(gr_debug_free_size_errors() == 0, "%ld wrong sizes", gr_debug_free_size_errors());
}

/* A custom hook sees matching sizes: its byte count returns to zero. */
static void test_hook_sees_exact_sizes(void) {
    gr_set_allocator(counting_alloc, NULL);
    void *a = gr_malloc(100), *b = gr_calloc(7, 9), *z = gr_malloc(0);
    b = gr_realloc(b, 63, 500);
    char *s = gr_sprintf("%0*d", 50, 7);
    CHECK_MSG(hook_blocks == 4 && hook_bytes == 100 + 500 + 1 + 51, "%ld blocks, %ld bytes", hook_blocks, hook_bytes);
    gr_free(a, 100);
    gr_free(b, 500);
    gr_free(z, 0);
    gr_strfree(s);
    CHECK_MSG(hook_bytes == 0 && hook_blocks == 0, "hook left with %ld bytes in %ld blocks", hook_bytes, hook_blocks);
    gr_set_allocator(NULL, NULL);
}

/* The block cache of a plan build (alloc.c): inside a scope a freed small block serves the next
 * request of its size class, every request still counts and can fail, and nothing is cached for
 * a user's hook. */
static void test_block_cache(void) {
    gr_debug_check_free_sizes(1);
    long live0 = gr_debug_live_allocs();
    gr_alloc_cache_begin();
    char *p = gr_malloc(40);
    CHECK(p != NULL);
    gr_free(p, 40);
    CHECK(gr_debug_live_allocs() == live0);
    char *q = gr_malloc(33); /* same class (48 bytes): the cached block */
    CHECK_MSG(q == p, "a freed block of the class was not reused");
    memset(q, 0x5a, 33);
    CHECK(gr_debug_live_allocs() == live0 + 1);
    /* a realloc within the class keeps the block; across classes it moves out */
    char *r = gr_realloc(q, 33, 47);
    CHECK(r == q);
    r = gr_realloc(r, 47, 5000);
    CHECK(r != NULL && r[0] == 0x5a && r[32] == 0x5a);
    gr_free(r, 5000);
    /* failure injection: a cached block does not make the request immune */
    void *c = gr_malloc(100);
    gr_free(c, 100);
    gr_debug_fail_alloc_after(1);
    CHECK(gr_malloc(100) == NULL);
    CHECK(gr_debug_live_allocs() == live0);
    void *d = gr_malloc(100);
    CHECK(d == c);
    gr_free(d, 100);
    /* nested scopes: an inner end keeps the cache */
    gr_alloc_cache_begin();
    gr_alloc_cache_end();
    d = gr_malloc(100);
    CHECK(d == c);
    gr_free(d, 100);
    gr_alloc_cache_end();
    CHECK(gr_debug_live_allocs() == live0);
    CHECK_MSG(gr_debug_free_size_errors() == 0, "%ld wrong sizes", gr_debug_free_size_errors());
    /* a user's hook sees every free at once: nothing is held for it */
    gr_set_allocator(counting_alloc, NULL);
    gr_alloc_cache_begin();
    void *e = gr_malloc(40);
    CHECK(hook_blocks == 1 && hook_bytes == 40);
    gr_free(e, 40);
    CHECK_MSG(hook_blocks == 0 && hook_bytes == 0, "hook left with %ld bytes in %ld blocks", hook_bytes, hook_blocks);
    gr_alloc_cache_end();
    gr_set_allocator(NULL, NULL);
}

/* A large gr_calloc (libc's calloc with the default allocator): zeroed, counted, fails by
 * injection, freed with its size; with a user's hook it goes through the hook. */
static void test_large_calloc(void) {
    gr_debug_check_free_sizes(1);
    long live0 = gr_debug_live_allocs();
    size_t n = (size_t)1 << 20;
    unsigned char *p = gr_malloc(n); /* dirty a block first, so a reused one would show */
    CHECK(p != NULL);
    if (p) memset(p, 0xab, n);
    gr_free(p, n);
    unsigned char *z = gr_calloc(n / 8, 8);
    CHECK(z != NULL);
    bool zero = true;
    for (size_t i = 0; z && i < n; i++) zero &= z[i] == 0;
    CHECK(zero);
    CHECK(gr_debug_live_allocs() == live0 + 1);
    gr_free(z, n);
    gr_debug_fail_alloc_after(1);
    CHECK(gr_calloc(n, 1) == NULL);
    CHECK(gr_debug_live_allocs() == live0);
    CHECK_MSG(gr_debug_free_size_errors() == 0, "%ld wrong sizes", gr_debug_free_size_errors());
    gr_set_allocator(counting_alloc, NULL);
    void *h = gr_calloc(n, 1);
    CHECK(h != NULL && hook_blocks == 1 && hook_bytes == (long)n);
    gr_free(h, n);
    CHECK(hook_blocks == 0 && hook_bytes == 0);
    gr_set_allocator(NULL, NULL);
}

int main(void) {
    test_wrong_sizes_are_caught();
    test_many_blocks();
    test_helpers_free_exact_sizes();
    test_hook_sees_exact_sizes();
    test_block_cache();
    test_large_calloc();
    return check_summary("test_alloc");
}
