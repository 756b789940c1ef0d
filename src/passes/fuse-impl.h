/* passes/fuse-impl — what fuse.c and fuse-grow.c share: one producer →
 * consumer fusion being planned (fuse_ctx), and kernels grown in place
 * (gr_fuse_wk, fuse-grow.c). */
#ifndef GR_FUSE_IMPL_H
#define GR_FUSE_IMPL_H

#include "passes/passes.h"

typedef struct {
    const gr_kernel *p;     /* producer */
    const gr_step *ps;
    const gr_kernel *c;     /* consumer */
    const gr_step *cs;
    int value;              /* the intermediate */
    int64_t rs[GR_MAX_DIMS]; /* row-major strides of P's space */
    int map[GR_MAX_DIMS];    /* P dim -> C index id (which), or -1 for an extent-1 dim */
    gr_kernel *n;           /* result (copying fusion) */
    gr_step_arg args[GR_KMAX_PARAMS];
    int pmap[GR_KMAX_PARAMS];
    /* growing fusion (fuse-grow.c): the plan made by gr_fuse_wk_prepare */
    int n_new_params;              /* P params appended to C: P param new_params[i] */
    int new_params[GR_KMAX_PARAMS];
    int n_targets;                 /* C's param slots bound to the intermediate */
    int targets[GR_KMAX_PARAMS];
    int first_load;                /* the first load of the intermediate in C's order */
    bool *cone;                    /* P's nodes the substitute needs (owned) */
    int *pm;                       /* P node -> C pool id while splicing (owned) */
} fuse_ctx;

/* Dim map of P's space onto C's loop nest and C's one access of the
 * intermediate (fuse.c, for a kernel in ordinary form). */
bool gr_fuse_plan_map(fuse_ctx *f);
/* The nodes of P the value it stores depends on: cone[j] (np entries). */
void gr_fuse_producer_cone(const gr_kernel *p, bool *cone);
/* Looks up or appends the consumer param for P's param pp in params[0..*n)
 * / args (what the copying fusion's map_param does); -1 when there is no room. */
int gr_fuse_map_param(const gr_kparam *src, const gr_step_arg *arg, gr_kparam *params, gr_step_arg *args, int *n);

/* ---- kernels grown in place --------------------------------------------------------------
 * Fusing a producer into a consumer by copying the consumer costs the size
 * of the consumer, which a chain of N fusions makes quadratic. A growing
 * kernel instead keeps its nodes in a pool that only grows, ordered by a
 * linked list (with order labels to compare positions), and a fusion
 * splices the producer's nodes in before the first load of the
 * intermediate, forwarding every such load to the substitute. Node params
 * are stable slots, mapped to param indices when the kernel is finished.
 * CSE runs once, at the finish: merging duplicates keeps first occurrences
 * in order, so merging after the last splice gives the same kernel as
 * merging after every one (every splice point is the first occurrence of
 * a load; nothing becomes dead), and the params (at most 32) are kept
 * exactly as the copying fusion keeps them after each step: appended,
 * unused ones dropped, names made unique. The result is the copying
 * fusion's kernel, node for node (tests/test_compile_scale.c checks). */
typedef struct gr_fuse_wk gr_fuse_wk;

/* Starts growing kernel k (in ordinary form, merged by CSE). k stays owned by its step. */
gr_status gr_fuse_wk_create(gr_kernel *k, gr_fuse_wk **out);
void gr_fuse_wk_destroy(gr_fuse_wk *w);
/* gr_fuse_plan_map for a growing consumer (f->c is its kernel). */
bool gr_fuse_wk_plan_map(const gr_fuse_wk *w, fuse_ctx *f);
/* Plans fusing f->p into w after gr_fuse_wk_plan_map: *fits = false when C
 * has no room for P's params (the copying fusion fails the same way);
 * *copy = true when growing cannot reproduce the copying fusion (the
 * caller finishes w and copies). Reserves all memory the apply needs;
 * changes nothing. Free what it made with gr_fuse_ctx_release. */
gr_status gr_fuse_wk_prepare(gr_fuse_wk *w, fuse_ctx *f, bool *fits, bool *copy);
/* Splices the prepared fusion in; cs is C's step (its args follow the params). Cannot fail. */
void gr_fuse_wk_apply(gr_fuse_wk *w, fuse_ctx *f, gr_step *cs);
/* Back to ordinary form (nodes in order, params by index), then CSE and
 * verify. Destroys w. The kernel is valid and computes the same values
 * even when this fails (out of memory in CSE leaves duplicates). */
gr_status gr_fuse_wk_finish(gr_fuse_wk *w, gr_step *cs);
void gr_fuse_ctx_release(fuse_ctx *f);

/* The dtype a producer's substitute is cast to (what its store into the intermediate
 * rounds or wraps to), or -1 for none (fuse-grow.c). */
int gr_fuse_substitute_cast(const gr_kernel *p);
/* The accesses of the loads of `value` in growing kernel w (cs its step), at most max
 * (fuse-move.c's planning); -1 when w cannot take a substitution (see gr_fuse_move_loads). */
int gr_fuse_wk_value_loads(const gr_fuse_wk *w, const gr_step *cs, int value, const gr_kaccess **out, int max);

/* ---- movement kernels recomputed through any affine access (fuse-move.c) ------------------ */
#define GR_FUSE_MAX_PARTS 4  /* concat parts a substitute may select among */
#define GR_FUSE_MOVE_LOADS 16 /* loads of the moved value in one reader */
/* The moved value's space and its writers. */
typedef struct {
    int nd;
    int64_t ext[GR_MAX_DIMS], rs[GR_MAX_DIMS]; /* extents, row-major strides */
    uint32_t var;                              /* symbolic dims */
    int axis;                                  /* a concat's axis; -1: one part covering the space */
    int n_parts;                               /* in start order */
    const gr_step *part[GR_FUSE_MAX_PARTS];
    int part_step[GR_FUSE_MAX_PARTS];
    int64_t start[GR_FUSE_MAX_PARTS], len[GR_FUSE_MAX_PARTS]; /* along the axis */
} gr_fuse_move;
/* The LOAD node behind a movement kernel's store, or -1 when k is not one. */
int gr_fuse_move_load(const gr_kernel *k);
/* m for movement kernel ps (step `step`) that stores its value contiguously (fuse.c's
 * producer_value holds); false if it is not a movement kernel. */
bool gr_fuse_move_single(const gr_step *ps, int step, gr_fuse_move *m);
/* m for n kernels that together write value (graph value val), each a box of it: a
 * concat's parts; false unless they are movement kernels tiling val along one axis. */
bool gr_fuse_move_parts(const gr_ir_value *val, int value, const gr_step *const *parts, const int *steps, int n,
                        gr_fuse_move *m);
/* The accesses of c's loads of value (ordinary form), or -1 as gr_fuse_wk_value_loads. */
int gr_fuse_move_loads(const gr_kernel *c, const gr_step *cs, int value, const gr_kaccess **out, int max);
/* Whether every one of those loads can be substituted. */
bool gr_fuse_move_plan(const gr_fuse_move *m, const gr_kernel *c, const gr_kaccess *const *loads, int n_loads);
/* Builds reader cs (ordinary form) with every load of value substituted: *out and args
 * (GR_KMAX_PARAMS entries); *applied = false (and nothing made) when the params do not fit. */
gr_status gr_fuse_move_into(const gr_fuse_move *m, int value, const gr_step *cs, gr_kernel **out, gr_step_arg *args,
                            bool *applied);
/* The substitute of c's load of the value at access ca, built into `scratch` (emptied first):
 * node 0 stands for ca's gather index, a LOAD's param names the part it reads (its source
 * is gr_fuse_move_part_src), *root is the substitute. */
gr_status gr_fuse_move_substitute(const gr_fuse_move *m, const gr_kernel *c, const gr_kaccess *ca, gr_kernel *scratch,
                                  int *root);
void gr_fuse_move_part_src(const gr_fuse_move *m, int p, const gr_kparam **param, const gr_step_arg **arg);
/* Maps e's operands (and a LOAD's gather index) through map. */
void gr_fuse_remap_operands(gr_kexpr *e, const int *map);
/* The same substitution into a kernel grown in place (fuse-grow.c), planned first for every
 * reader and then applied, so that all readers take it or none: prepare reserves all the
 * memory apply needs and changes nothing; *fits = false when the params do not fit (copying
 * fails too), *copy when growing cannot reproduce copying (finish w, then copy). Release
 * the plan with gr_fuse_wk_move_release unless it was applied. */
typedef struct gr_fuse_wk_move_plan gr_fuse_wk_move_plan;
gr_status gr_fuse_wk_move_prepare(gr_fuse_wk *w, const gr_step *cs, const gr_fuse_move *m, int value, bool *fits,
                                  bool *copy, gr_fuse_wk_move_plan **out);
void gr_fuse_wk_move_apply(gr_fuse_wk *w, gr_step *cs, gr_fuse_wk_move_plan *plan); /* frees plan; cannot fail */
void gr_fuse_wk_move_release(gr_fuse_wk_move_plan *plan);

/* fuse-store.c: moves each elementwise consumer that is a function of one
 * kernel's output alone (a cast, reached directly or through views) into that
 * kernel's store; *n_fused counts them. Dead views are left to gr_pass_dce. */
gr_status gr_pass_fuse_store_consumers(const gr_graph *g, gr_step_list *steps, int *n_fused);

/* What fuse-store.c and fuse-row.c do with the kernel they built (shared, fuse-store.c). */
/* Renames n's param w when an earlier param has its name ("y<w>", then "y<w+100>", ...). */
void gr_fuse_unique_param_name(gr_kernel *n, int w);
/* Installs n, which absorbed consumer c, as step into's kernel with args: CSE, verify, the
 * earlier of the two source nodes, and into's old kernel destroyed; *done = true. On
 * failure n is destroyed, into is unchanged and the error names both kernels (`what`: "the
 * store", "the rows"). */
gr_status gr_fuse_install(gr_kernel *n, gr_step_arg *args, const gr_kernel *c, gr_step *into, const char *what,
                          bool *done);

/* fuse-row.c: moves each elementwise consumer of a row reduction's per-row result (RMSNorm's
 * x * r[row] * w[col]) into the reduction kernel as a store over the row; *n_fused counts
 * them. Dead views are left to gr_pass_dce. */
gr_status gr_pass_fuse_row_consumers(const gr_graph *g, gr_step_list *steps, int *n_fused);

/* Does step s write value v through one of its args a.. (the first binding v)? A kernel writes
 * its written params, a library call its args[2] alone (kir.h: a residual, bias or operand is
 * only read), a view nothing; a host step is taken to write everything it binds. */
static inline bool gr_fuse_step_writes(const gr_step *s, int a, int v) {
    if (s->kind == GR_STEP_ALIAS) return false;
    if (s->kind == GR_STEP_LIBCALL) return a <= 2 && s->n_args > 2 && s->args[2].kind == GR_ARG_VALUE && s->args[2].value == v;
    if (s->kind != GR_STEP_KERNEL || !s->kernel) return true;
    for (int b = a; b < s->n_args && b < s->kernel->n_params; b++)
        if (s->kernel->params[b].written && s->args[b].kind == GR_ARG_VALUE && s->args[b].value == v) return true;
    return false;
}

#endif
