/* device/cuda/cuda-kernel — kernel_prepare: render, compile with NVRTC for the
 * device's exact architecture, cache the cubin on disk, load the module. */
#include "codegen/render-cuda.h"
#include "device/cuda/cuda-cache.h"
#include "device/cuda/cuda-impl.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* ==== compile or load ================================================================================ */

static gr_status load_module(gr_cuda_ctx *c, const void *image, CUmodule *mod) {
    GR_CU_CHECK(c->cu->cuModuleLoadData(mod, image));
    c->kstats.module_loads++;
    return GR_OK;
}

/* The module of `source`: from the disk cache, else compiled with NVRTC (and stored). */
static gr_status source_module(gr_cuda_ctx *c, const char *source, const char *name, CUmodule *mod, bool *from_cache) {
    *mod = NULL;
    *from_cache = false;
    gr_cuda_cache kc = kernel_cache(c);
    void *image = NULL;
    size_t image_n = 0;
    if (gr_cuda_cache_load(&kc, source, &image, &image_n)) {
        if (load_module(c, image, mod) == GR_OK) {
            *from_cache = true;
            c->kstats.disk_cache_hits++;
        } else { /* valid entry the driver refuses: compile again and store over it */
            char *path = gr_cuda_cache_path(&kc, source);
            fprintf(stderr, "graft: warning: kernel cache entry '%s' does not load (%s); compiling kernel %s again\n",
                    path ? path : "?", gr_last_error(), name);
            gr_strfree(path);
            gr_error_clear();
        }
        gr_cuda_cache_free(image, image_n);
    }
    if (*from_cache) return GR_OK;
    GR_TRY(gr_cuda_nvrtc_compile(source, name, c->arch, false, &image, &image_n));
    c->kstats.compiles++;
    gr_status st = load_module(c, image, mod);
    if (st == GR_OK) gr_cuda_cache_store(&kc, source, image, image_n);
    gr_free(image, image_n);
    return st == GR_OK ? GR_OK : gr_error_prefix(st, "kernel %s", name);
}

/* ==== shared generic modules ========================================================================
 * One per distinct generic source in a device context, refcounted by the gr_kfuncs
 * using it: a plan destroyed releases its kernels, the last release unloads. */

struct gr_cuda_module {
    gr_kstructure structure; /* of the kernel it was rendered from: a kernel of equal structure
                                renders the same source, so a prepare finds its module without
                                rendering (words empty: not known) */
    uint64_t key;        /* hash of the source */
    char *source;        /* compared on a key match: a hash collision never shares a module */
    size_t source_bytes;
    CUmodule module;
    CUfunction fn;
    bool table; /* GR_RENDER_GENERIC_TABLE code (slots through a pointer), else by value */
    int refs;
};

static void module_free(gr_cuda_ctx *c, gr_cuda_module *m) {
    if (m->module) c->cu->cuModuleUnload(m->module);
    gr_kstructure_free(&m->structure);
    if (m->source) gr_free(m->source, m->source_bytes);
    gr_free(m, sizeof(*m));
}

/* A loaded module rendered from a kernel of structure ks (table code or not), or of source src;
 * NULL when none. No reference is taken. */
static gr_cuda_module *module_lookup(const gr_cuda_ctx *c, const gr_kstructure *ks, const gr_strbuf *src, bool table) {
    uint64_t key = src ? gr_hash_bytes(src->data, src->len, 0x6d6f64756c65ull) : 0;
    for (int i = 0; i < c->modules.len; i++) {
        gr_cuda_module *m = c->modules.data[i];
        if (ks && m->table == table && m->structure.words && gr_kstructure_equal(&m->structure, ks)) return m;
        if (src && m->key == key && m->source_bytes == src->len + 1 && !memcmp(m->source, src->data, src->len)) return m;
    }
    return NULL;
}

/* ks: k's structure; a module made here takes it (ks->words NULL afterwards). */
static gr_status module_get(gr_cuda_ctx *c, const gr_kernel *k, gr_kstructure *ks, const gr_strbuf *src, bool table,
                            gr_cuda_module **out, bool *from_cache) {
    *out = NULL;
    gr_cuda_module *found = module_lookup(c, NULL, src, table);
    if (found) {
        found->refs++;
        c->kstats.generic_reused++;
        *out = found;
        return GR_OK;
    }
    uint64_t key = gr_hash_bytes(src->data, src->len, 0x6d6f64756c65ull);
    GR_TRY(gr_vec_reserve(&c->modules, c->modules.len + 1));
    gr_cuda_module *m = gr_calloc(1, sizeof(*m));
    if (!m) return GR_ERR_NOMEM;
    m->key = key;
    m->table = table;
    m->structure = *ks;
    memset(ks, 0, sizeof *ks);
    m->source_bytes = src->len + 1;
    m->source = gr_malloc(m->source_bytes);
    gr_status st = m->source ? GR_OK : GR_ERR_NOMEM;
    if (st == GR_OK) {
        memcpy(m->source, src->data, m->source_bytes);
        st = source_module(c, src->data, k->name, &m->module, from_cache);
    }
    char entry[64];
    gr_render_cuda_entry_name(k, table ? GR_RENDER_GENERIC_TABLE : GR_RENDER_GENERIC, entry, sizeof entry);
    if (st == GR_OK) {
        st = GR_CU_STATUS(c->cu->cuModuleGetFunction(&m->fn, m->module, entry));
        if (st != GR_OK) gr_error_prefix(st, "kernel %s", k->name);
    }
    if (st != GR_OK) {
        module_free(c, m);
        return st;
    }
    m->refs = 1;
    c->modules.data[c->modules.len++] = m;
    c->kstats.generic_new++;
    *out = m;
    return GR_OK;
}

/* A loaded module rendered from a kernel of k's structure, or NULL (no rendering needed to find it). */
static gr_status module_find_structure(gr_cuda_ctx *c, const gr_kstructure *ks, bool table, gr_cuda_module **out) {
    *out = module_lookup(c, ks, NULL, table);
    if (*out) {
        (*out)->refs++;
        c->kstats.generic_reused++;
    }
    return GR_OK;
}

static void module_put(gr_cuda_ctx *c, gr_cuda_module *m) {
    if (!m || --m->refs > 0) return;
    for (int i = 0; i < c->modules.len; i++)
        if (c->modules.data[i] == m) {
            c->modules.data[i] = c->modules.data[--c->modules.len];
            break;
        }
    module_free(c, m);
}

void gr_cuda_modules_destroy(gr_cuda_ctx *c) {
    for (int i = 0; i < c->modules.len; i++) module_free(c, c->modules.data[i]);
    gr_vec_free(&c->modules);
}

/* How kernel_prepare renders k under flags: slot-table code, generic code (sizes by value; literal
 * instead when k has more slots than a launch carries: *fallback), or literal code. */
static gr_render_mode prepare_mode(const gr_kernel *k, unsigned flags, bool *table, bool *generic, bool *fallback) {
    *table = (flags & GR_KPREP_SLOT_TABLE) != 0;
    *generic = (flags & GR_KPREP_GENERIC) != 0 || *table;
    *fallback = *generic && !*table && gr_kernel_slot_count(k) > GR_KMAX_SLOTS;
    if (*fallback) *generic = false;
    return *table ? GR_RENDER_GENERIC_TABLE : *generic ? GR_RENDER_GENERIC : GR_RENDER_LITERAL;
}

/* ==== compiling ahead, in parallel =================================================================
 * A plan's kernels are prepared one by one, and each missing from the disk cache is an NVRTC
 * compile of its own (about 0.2 s each: the first load of GPT-2 small took 8.2 s on the H100 with
 * a cold cache against 1.5 s warm, bench/shapes/2026-11-24-h100-session10). NVRTC compiles
 * separate programs on separate threads, so the sources the prepares would compile are found first
 * (rendered as kernel_prepare renders them, skipping what a loaded module or the disk cache holds)
 * and compiled on up to WARM_THREADS threads into the disk cache; the prepares then load them.
 * Without a disk cache nothing is done (the cubins would have nowhere to wait). */
#define WARM_THREADS 16

typedef struct {
    char **src;
    const char **name;
    void **img;
    size_t *img_n;
    int n, arch;
    atomic_int next;
} warm_job;

static void *warm_worker(void *arg) {
    warm_job *j = arg;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;)
        if (gr_cuda_nvrtc_compile(j->src[i], j->name[i], j->arch, false, &j->img[i], &j->img_n[i]) != GR_OK) {
            j->img[i] = NULL; /* the prepare compiles it again and reports why */
            gr_error_clear();
        }
    return NULL;
}

gr_status gr_cuda_kernels_warm(gr_cuda_ctx *c, const gr_kernel *const *ks, const unsigned *flags, int n) {
    gr_cuda_cache kc = kernel_cache(c);
    if (!kc.dir || !kc.dir[0] || n < 2) return GR_OK;
    warm_job j = {.arch = c->arch};
    j.src = gr_calloc((size_t)n, sizeof *j.src);
    j.name = gr_calloc((size_t)n, sizeof *j.name);
    j.img = gr_calloc((size_t)n, sizeof *j.img);
    j.img_n = gr_calloc((size_t)n, sizeof *j.img_n);
    gr_status st = j.src && j.name && j.img && j.img_n ? GR_OK : GR_ERR_NOMEM;
    for (int i = 0; i < n && st == GR_OK; i++) {
        const gr_kernel *k = ks[i];
        bool table, generic, fallback;
        gr_render_mode mode = prepare_mode(k, flags[i], &table, &generic, &fallback);
        gr_kstructure kst = {0};
        if (generic && (st = gr_kstructure_of(k, &kst)) != GR_OK) break;
        bool skip = generic && module_lookup(c, &kst, NULL, table);
        gr_kstructure_free(&kst);
        if (skip) continue;
        gr_strbuf sb;
        gr_sb_init(&sb);
        st = gr_render_cuda_mode(k, mode, &sb);
        if (st != GR_OK) { /* the prepare renders it again and reports why */
            gr_sb_free(&sb);
            st = st == GR_ERR_NOMEM ? st : GR_OK;
            gr_error_clear();
            continue;
        }
        skip = generic && module_lookup(c, NULL, &sb, table);
        for (int q = 0; q < j.n && !skip; q++) skip = !strcmp(j.src[q], sb.data);
        char *path = skip ? NULL : gr_cuda_cache_path(&kc, sb.data);
        skip = skip || !path || access(path, R_OK) == 0;
        gr_strfree(path);
        if (skip) {
            gr_sb_free(&sb);
            continue;
        }
        j.src[j.n] = gr_strdup(sb.data);
        gr_sb_free(&sb);
        if (!j.src[j.n]) st = GR_ERR_NOMEM;
        else j.name[j.n++] = k->name;
    }
    if (st == GR_OK && j.n >= 2) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int nt = (int)GR_MIN((long)j.n, GR_MIN(cpus > 0 ? cpus : 1, (long)WARM_THREADS)), started = 0;
        pthread_t th[WARM_THREADS];
        atomic_init(&j.next, 0);
        for (int t = 0; t < nt; t++) started += pthread_create(&th[started], NULL, warm_worker, &j) == 0;
        if (!started) warm_worker(&j);
        for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
        for (int i = 0; i < j.n; i++)
            if (j.img[i]) {
                gr_cuda_cache_store(&kc, j.src[i], j.img[i], j.img_n[i]);
                c->kstats.compiles++;
            }
    }
    for (int i = 0; j.src && i < j.n; i++) {
        gr_strfree(j.src[i]);
        if (j.img && j.img[i]) gr_free(j.img[i], j.img_n[i]);
    }
    gr_free(j.src, sizeof *j.src * (size_t)n);
    gr_free(j.name, sizeof *j.name * (size_t)n);
    gr_free(j.img, sizeof *j.img * (size_t)n);
    gr_free(j.img_n, sizeof *j.img_n * (size_t)n);
    return st;
}

/* ==== prepare / release =========================================================================== */

gr_status gr_cuda_kernel_prepare(gr_cuda_ctx *c, const gr_kernel *k, unsigned flags, gr_kfunc **out) {
    *out = NULL;
    bool table, generic, fallback;
    gr_render_mode mode = prepare_mode(k, flags, &table, &generic, &fallback);
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_cuda_module *known = NULL;
    gr_kstructure ks = {0};
    gr_status st = generic ? gr_kstructure_of(k, &ks) : GR_OK;
    if (st == GR_OK && generic) st = module_find_structure(c, &ks, table, &known);
    /* a structure seen before: its module, without rendering the source again (what a new binding
     * of a symbolic graph mostly prepares) */
    if (st == GR_OK && !known) st = gr_render_cuda_mode(k, mode, &sb);
    if (st != GR_OK) {
        gr_sb_free(&sb);
        gr_kstructure_free(&ks);
        module_put(c, known);
        return st;
    }
    gr_kfunc *f = gr_calloc(1, sizeof(*f));
    if (!f) {
        gr_sb_free(&sb);
        gr_kstructure_free(&ks);
        module_put(c, known);
        return GR_ERR_NOMEM;
    }
    f->shared = known; /* released with f from here on */
    if (flags & GR_KPREP_BORROW) {
        f->kernel = (gr_kernel *)k; /* never written through: the launch reads its dims */
        f->kernel_borrowed = true;
    } else {
        st = gr_kernel_clone(k, &f->kernel);
        if (st != GR_OK) goto fail;
    }
    f->table = table;
    if (table) {
        if (!f->shared) st = module_get(c, k, &ks, &sb, table, &f->shared, &f->from_cache);
        if (st != GR_OK) goto fail;
        f->fn = f->shared->fn;
    } else if (generic) {
        gr_kslot_map map;
        st = gr_kslot_map_build(k, &map);
        if (st != GR_OK) goto fail;
        f->n_slots = map.n;
        f->slots = gr_malloc(sizeof(int64_t) * (size_t)(map.n > 0 ? map.n : 1));
        if (f->slots) gr_kernel_slot_values(k, &map, f->slots);
        gr_kslot_map_free(&map);
        if (!f->slots) {
            st = GR_ERR_NOMEM;
            goto fail;
        }
        if (!f->shared) st = module_get(c, k, &ks, &sb, false, &f->shared, &f->from_cache);
        if (st != GR_OK) goto fail;
        f->fn = f->shared->fn;
    } else {
        st = source_module(c, sb.data, k->name, &f->module, &f->from_cache);
        if (st != GR_OK) goto fail;
        st = GR_CU_STATUS(c->cu->cuModuleGetFunction(&f->fn, f->module, k->name));
        if (st != GR_OK) {
            gr_error_prefix(st, "kernel %s", k->name);
            goto fail;
        }
    }
    gr_sb_free(&sb);
    gr_kstructure_free(&ks);
    c->kstats.prepared++;
    c->kstats.generic_fallbacks += fallback;
    *out = f;
    return GR_OK;
fail:
    gr_sb_free(&sb);
    gr_kstructure_free(&ks);
    gr_cuda_kernel_release(c, f);
    return st;
}

void gr_cuda_kernel_release(gr_cuda_ctx *c, gr_kfunc *f) {
    if (!f) return;
    if (f->module) c->cu->cuModuleUnload(f->module);
    module_put(c, f->shared);
    if (f->slots) gr_free(f->slots, sizeof(int64_t) * (size_t)(f->n_slots > 0 ? f->n_slots : 1));
    if (!f->kernel_borrowed) gr_kernel_destroy(f->kernel);
    gr_free(f, sizeof(*f));
}

void gr_cuda_kernel_params(const gr_kfunc *f, const gr_karg *args, int n_args, void **params) {
    for (int i = 0; i < n_args; i++) params[i] = (void *)&args[i];
    /* the struct gr_dims_t argument: the driver copies n_slots * 8 bytes from here */
    if (f->shared && f->n_slots > 0) params[n_args] = f->slots;
}

void gr_cuda_kernel_dims(const gr_cuda_ctx *c, const gr_kfunc *f, const gr_karg *args, unsigned *grid,
                         unsigned *block) {
    const gr_kernel *k = f->kernel;
    int64_t n = k->n_points_param >= 0 ? args[k->n_points_param].i : gr_kernel_points(k);
    unsigned max_grid = (unsigned)(c->sm_count > 0 ? c->sm_count : 1) * 32u;
    gr_render_cuda_launch_dims(k, n, max_grid, grid, block);
    if (c->warp_row_block && gr_render_cuda_is_block_kernel(k) && gr_render_cuda_is_warp_row(k, n)) {
        *block = c->warp_row_block; /* the test hook (cuda-impl.h) */
        *grid = c->warp_row_grid;
    }
}
