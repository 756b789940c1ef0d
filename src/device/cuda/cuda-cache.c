/* device/cuda/cuda-cache — cubins on disk, through util/cache-file. */
#include "device/cuda/cuda-cache.h"
#include "util/cache-file.h"
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The payload kind: "cubn" and the layout generation of what is cached. */
#define GR_CUDA_CACHE_KIND 0x6e627563u /* 'c' 'u' 'b' 'n', little-endian */

static uint64_t key_with_seed(const gr_cuda_cache *c, const char *source, uint64_t seed) {
    int ver[3] = {c->arch, c->nvrtc_major, c->nvrtc_minor};
    const char *opts = c->options ? c->options : "";
    uint64_t h = gr_hash_bytes(source, strlen(source), seed);
    h = gr_hash_bytes(opts, strlen(opts) + 1, h); /* + NUL: source and options cannot trade bytes */
    return gr_hash_bytes(ver, sizeof ver, h);
}

uint64_t gr_cuda_cache_key(const gr_cuda_cache *c, const char *source) {
    return key_with_seed(c, source, 0x6772616674ull);
}

/* Stored in the entry's header: a second, independent hash of the same inputs,
 * so two sources whose names collide are still told apart. */
static uint64_t key_check(const gr_cuda_cache *c, const char *source) {
    return key_with_seed(c, source, 0x636865636bull);
}

char *gr_cuda_cache_path(const gr_cuda_cache *c, const char *source) {
    if (!c->dir || !c->dir[0]) return NULL;
    return gr_sprintf("%s/kernels/sm%d-%016llx.cubin", c->dir, c->arch,
                      (unsigned long long)gr_cuda_cache_key(c, source));
}

bool gr_cuda_cache_load(const gr_cuda_cache *c, const char *source, void **cubin, size_t *n) {
    *cubin = NULL;
    *n = 0;
    char *path = gr_cuda_cache_path(c, source);
    if (!path) {
        gr_error_clear();
        return false;
    }
    gr_status st = gr_cache_file_read(path, GR_CUDA_CACHE_KIND, key_check(c, source), GR_CUDA_CACHE_MAX_CUBIN, cubin, n);
    if (st != GR_OK && st != GR_ERR_NOT_FOUND && st != GR_ERR_NOMEM)
        fprintf(stderr, "graft: warning: ignoring kernel cache entry: %s; compiling the kernel again\n", gr_last_error());
    gr_strfree(path);
    if (st != GR_OK) gr_error_clear();
    return st == GR_OK;
}

void gr_cuda_cache_store(const gr_cuda_cache *c, const char *source, const void *cubin, size_t n) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    char *path = gr_cuda_cache_path(c, source);
    if (!path) {
        gr_error_clear();
        return;
    }
    gr_status st = gr_cache_file_write(path, GR_CUDA_CACHE_KIND, key_check(c, source), cubin, n);
    if (st != GR_OK && st != GR_ERR_NOMEM && !atomic_flag_test_and_set(&warned))
        fprintf(stderr, "graft: warning: kernel cache not written (%s); kernels will be compiled again next time\n",
                gr_last_error());
    if (st != GR_OK) gr_error_clear();
    gr_strfree(path);
}

void gr_cuda_cache_free(void *cubin, size_t n) { gr_cache_file_free(cubin, n); }
