/* device/cuda/cuda-kernel — kernel_prepare: render, compile with NVRTC for the
 * device's exact architecture, cache the cubin on disk, load the module. */
#include "codegen/render-cuda.h"
#include "device/cuda/cuda-cache.h"
#include "device/cuda/cuda-impl.h"
#include <stdio.h>
#include <string.h>

/* ==== disk cache (cuda-cache.c) ============================================================ */

static gr_cuda_cache kernel_cache(const gr_cuda_ctx *c) {
    gr_cuda_cache kc = {.dir = c->cache_dir, .arch = c->arch, .options = gr_cuda_nvrtc_options()};
    const gr_nvrtc_api *nv = NULL;
    if (gr_cuda_load_nvrtc(&nv) == GR_OK) {
        kc.nvrtc_major = nv->major;
        kc.nvrtc_minor = nv->minor;
    }
    return kc;
}

/* ==== prepare / release =========================================================================== */

static gr_status load_module(gr_cuda_ctx *c, const void *image, CUmodule *mod) {
    CUresult r = c->cu->cuModuleLoadData(mod, image);
    if (r != CUDA_SUCCESS) return gr_cuda_fail(c->cu, r, "cuModuleLoadData");
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
    gr_cuda_cache kc = kernel_cache(c);
    void *image = NULL;
    size_t image_n = 0;
    if (gr_cuda_cache_load(&kc, sb.data, &image, &image_n)) {
        if (load_module(c, image, &f->module) == GR_OK) {
            f->from_cache = true;
        } else { /* valid entry the driver refuses: compile again and store over it */
            char *path = gr_cuda_cache_path(&kc, sb.data);
            fprintf(stderr, "graft: warning: kernel cache entry '%s' does not load (%s); compiling kernel %s again\n",
                    path ? path : "?", gr_last_error(), k->name);
            gr_strfree(path);
            gr_error_clear();
        }
        gr_cuda_cache_free(image, image_n);
    }
    if (!f->from_cache) {
        st = gr_cuda_nvrtc_compile(sb.data, k->name, c->arch, false, &image, &image_n);
        if (st != GR_OK) goto fail;
        st = load_module(c, image, &f->module);
        if (st == GR_OK) gr_cuda_cache_store(&kc, sb.data, image, image_n);
        gr_free(image, image_n);
        if (st != GR_OK) {
            gr_error_prefix(st, "kernel %s", k->name);
            goto fail;
        }
    }
    CUresult r = c->cu->cuModuleGetFunction(&f->fn, f->module, k->name);
    if (r != CUDA_SUCCESS) {
        st = gr_cuda_fail(c->cu, r, "cuModuleGetFunction");
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
