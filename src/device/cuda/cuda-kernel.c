/* device/cuda/cuda-kernel — kernel_prepare: render, compile with NVRTC for the
 * device's exact architecture, cache the cubin on disk, load the module. */
#include "codegen/render-cuda.h"
#include "device/cuda/cuda-impl.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== disk cache ============================================================================ */

static void mkdir_p(const char *path) {
    char buf[1200];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
}

static uint64_t cache_key(const char *source, int arch) {
    const gr_nvrtc_api *nv = NULL;
    int ver[3] = {arch, 0, 0};
    if (gr_cuda_load_nvrtc(&nv) == GR_OK) {
        ver[1] = nv->major;
        ver[2] = nv->minor;
    }
    uint64_t h = gr_hash_bytes(source, strlen(source), 0x6772616674ull);
    const char *opts = gr_cuda_nvrtc_options();
    h = gr_hash_bytes(opts, strlen(opts), h);
    return gr_hash_bytes(ver, sizeof ver, h);
}

static void cache_path(const gr_cuda_ctx *c, uint64_t key, char *out, size_t n) {
    snprintf(out, n, "%s/kernels/sm%d-%016llx.cubin", c->cache_dir, c->arch, (unsigned long long)key);
}

/* Reads a cached cubin; false when absent or unreadable (never an error). */
static bool cache_read(const gr_cuda_ctx *c, uint64_t key, void **out, size_t *n) {
    if (!c->cache_dir) return false;
    char path[1200];
    cache_path(c, key, path, sizeof path);
    if (access(path, R_OK) != 0) return false;
    char *buf;
    size_t len;
    if (gr_read_file(path, &buf, &len) != GR_OK) {
        gr_error_clear();
        return false;
    }
    if (len < 16) {
        gr_free(buf, len + 1);
        return false;
    }
    *out = buf;
    *n = len + 1; /* gr_read_file allocated len + 1 */
    return true;
}

/* Best effort: a cache that cannot be written only costs a recompile next time. */
static void cache_write(const gr_cuda_ctx *c, uint64_t key, const void *data, size_t n) {
    if (!c->cache_dir) return;
    char dir[1100], path[1200], tmp[1300];
    snprintf(dir, sizeof dir, "%s/kernels", c->cache_dir);
    mkdir_p(dir);
    cache_path(c, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    bool ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* ==== prepare / release =========================================================================== */

static gr_status load_module(gr_cuda_ctx *c, const void *image, CUmodule *mod) {
    GR_CU_CHECK(c->cu->cuModuleLoadData(mod, image));
    return GR_OK;
}

gr_status gr_cuda_kernel_prepare(gr_cuda_ctx *c, const gr_kernel *k, gr_kfunc **out) {
    *out = NULL;
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_status st = gr_render_cuda(k, &sb);
    if (st != GR_OK) {
        gr_sb_free(&sb);
        return st;
    }
    gr_kfunc *f = gr_calloc(1, sizeof(*f));
    if (!f) {
        gr_sb_free(&sb);
        return GR_ERR_NOMEM;
    }
    st = gr_kernel_clone(k, &f->kernel);
    if (st != GR_OK) goto fail;
    uint64_t key = cache_key(sb.data, c->arch);
    void *image = NULL;
    size_t image_n = 0;
    if (cache_read(c, key, &image, &image_n)) {
        if (load_module(c, image, &f->module) == GR_OK) f->from_cache = true;
        else gr_error_clear(); /* stale or corrupt entry: compile again and overwrite it */
        gr_free(image, image_n);
    }
    if (!f->from_cache) {
        st = gr_cuda_nvrtc_compile(sb.data, k->name, c->arch, false, &image, &image_n);
        if (st != GR_OK) goto fail;
        st = load_module(c, image, &f->module);
        if (st == GR_OK) cache_write(c, key, image, image_n);
        gr_free(image, image_n);
        if (st != GR_OK) {
            gr_error_prefix(st, "kernel %s", k->name);
            goto fail;
        }
    }
    st = GR_CU_STATUS(c->cu->cuModuleGetFunction(&f->fn, f->module, k->name));
    if (st != GR_OK) {
        gr_error_prefix(st, "kernel %s", k->name);
        goto fail;
    }
    gr_sb_free(&sb);
    *out = f;
    return GR_OK;
fail:
    gr_sb_free(&sb);
    gr_cuda_kernel_release(c, f);
    return st;
}

void gr_cuda_kernel_release(gr_cuda_ctx *c, gr_kfunc *f) {
    if (!f) return;
    if (f->module) c->cu->cuModuleUnload(f->module);
    gr_kernel_destroy(f->kernel);
    gr_free(f, sizeof(*f));
}

void gr_cuda_kernel_dims(const gr_cuda_ctx *c, const gr_kfunc *f, const gr_karg *args, unsigned *grid,
                         unsigned *block) {
    const gr_kernel *k = f->kernel;
    int64_t n = k->n_points_param >= 0 ? args[k->n_points_param].i : gr_kernel_points(k);
    unsigned max_grid = (unsigned)(c->sm_count > 0 ? c->sm_count : 1) * 32u;
    gr_render_cuda_launch_dims(k, n, max_grid, grid, block);
}
