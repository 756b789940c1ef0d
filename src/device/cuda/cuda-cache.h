/* device/cuda/cuda-cache — the on-disk cubin cache: one entry per (CUDA source,
 * NVRTC options, architecture, NVRTC version), kept as a util/cache-file entry
 * under <dir>/kernels/. Depends on util only (no CUDA headers), so it is tested
 * on machines without CUDA.
 *
 * Entries are written atomically and validated on read: several processes may
 * share one cache directory. A bad entry (truncated, corrupt, written by
 * another format or for another key) is reported with a warning naming the
 * file and treated as a miss; the caller compiles again and stores over it. */
#ifndef GR_CUDA_CACHE_H
#define GR_CUDA_CACHE_H

#include "util/util.h"

/* Generated kernels compile to kilobytes; a larger entry is not one of ours. */
#define GR_CUDA_CACHE_MAX_CUBIN ((size_t)64 << 20)

typedef struct {
    const char *dir;     /* cache root; NULL or "": no disk cache */
    int arch;            /* 90 for sm_90 */
    int nvrtc_major, nvrtc_minor;
    const char *options; /* the NVRTC options the cubin is compiled with */
} gr_cuda_cache;

/* The entry's name in the directory (and the first half of its key). */
uint64_t gr_cuda_cache_key(const gr_cuda_cache *c, const char *source);
/* "<dir>/kernels/sm<arch>-<key>.cubin", gr_strfree'd by the caller; NULL without a dir or memory. */
char *gr_cuda_cache_path(const gr_cuda_cache *c, const char *source);
/* true and the cubin (free with gr_cuda_cache_free) on a hit; false on a miss. */
bool gr_cuda_cache_load(const gr_cuda_cache *c, const char *source, void **cubin, size_t *n);
/* Best effort: a cache that cannot be written costs a recompile next time
 * (warned about once per process). */
void gr_cuda_cache_store(const gr_cuda_cache *c, const char *source, const void *cubin, size_t n);
void gr_cuda_cache_free(void *cubin, size_t n);

#endif
