/* codegen/kir — the kernel IR: an iteration space (loop nest) plus an
 * expression DAG, with every parameter explicit.
 *
 * The simulator interprets it; the CUDA backend renders it to CUDA C. Both
 * must agree on the semantics written here.
 *
 * Iteration space
 *   outer dims  o[0..n_outer)   extents outer[d]  (parallel: one CUDA thread per point,
 *                               or one block per point when the kernel has inner dims)
 *   inner dims  r[0..n_inner)   extents inner[d]  (the "row": reduced by REDUCE stages and
 *                               walked by STORE stages with over_inner = 1)
 *   A kernel with n_inner = 0 is purely elementwise over the outer points.
 *
 * Stages run in order for each outer point:
 *   REDUCE j : acc_j = fold(fn, init, value(r) for all r in the inner space)
 *   STORE    : if over_inner: for all r: buf[addr(o, r)] = value(o, r)
 *              else:          buf[addr(o)] = value(o)  (must not read inner indices)
 *              A store whose access has an index is a scatter: its address takes the index
 *              term below exactly as a gather's does (same wrap and bounds rules: the
 *              simulator reports an out-of-range index as an error naming access.origin,
 *              rendered CUDA clamps). Its points must store to distinct addresses (which of
 *              two stores to one address lands is unspecified). Fusion never makes a scatter
 *              kernel a producer or moves it into another kernel's store; it takes producers
 *              into its loads unless they read what it writes (passes/fuse.c: scatter_hazard).
 * Expression nodes may read accumulators of earlier REDUCE stages (GR_KX_ACC).
 *
 * Addressing (in elements of the buffer's dtype):
 *   addr = offset + sum_d stride[d]*o[d] + sum_d inner_stride[d]*r[d]
 *          + (index >= 0 ? wrap(value(index)) * index_stride : 0)
 *   wrap(i) = i < 0 ? i + index_extent : i;  0 <= wrap(i) < index_extent is required
 *   (the simulator reports a violation as an error naming the kernel and, through
 *   gr_error_node, the IR node in access.origin; rendered CUDA code clamps
 *   wrap(i) into [0, index_extent) so a bad index never reads out of bounds).
 *
 * Arithmetic: a node's dtype is its logical type. f16/bf16 are computed in f32
 * and rounded when stored or cast; f32 in f32; f64 in f64; integers and bool in
 * int64 and wrapped to their width when stored or cast. bool is 0/1.
 *
 * Parameters: every buffer, scalar and shape a kernel reads is a parameter,
 * passed at launch in a gr_karg array (one 8-byte slot each). A BUFFER param
 * holds a device address; a BUFFER_INDIRECT param holds the device address of
 * a slot holding the buffer's address (parameter indirection, GraCE's PI);
 * SCALAR_F / SCALAR_I hold a value; SHAPE holds an extent (n_points_param
 * names the one that bounds the launch).
 *
 * RANDOM: x = seed * 0x9E3779B97F4A7C15 + counter (uint64, wrapping), then
 * splitmix64's finalizer: x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27;
 * x *= 0x94D049BB133111EB; x ^= x >> 31. f32: (x >> 40) * 2^-24; f64: (x >> 11) * 2^-53.
 */
#ifndef GR_KIR_H
#define GR_KIR_H

#include "util/util.h"

#define GR_KMAX_PARAMS 32
#define GR_KMAX_STAGES 8

typedef enum {
    GR_KP_BUFFER = 0,
    GR_KP_BUFFER_INDIRECT, /* no lowering emits it yet: parameter indirection for the "generic"
                              many-shapes policy and zero-copy inputs (with device-updatable
                              nodes, device.h); exercised by test_interp, test_render, gpucheck */
    GR_KP_SCALAR_F,
    GR_KP_SCALAR_I,
    GR_KP_SHAPE,
} gr_kparam_kind;

typedef struct {
    gr_kparam_kind kind;
    gr_dtype dtype;   /* element type of a buffer; value type of a scalar */
    bool written;     /* buffer stored to by this kernel */
    char name[24];    /* for printing and rendered code */
} gr_kparam;

/* one launch argument */
typedef union {
    void *ptr;     /* BUFFER: device address; BUFFER_INDIRECT: address of the slot */
    double f;      /* SCALAR_F */
    int64_t i;     /* SCALAR_I, SHAPE */
    uint64_t bits;
} gr_karg;

typedef enum {
    GR_KX_CONST = 0, /* f (float dtypes) or i (ints, bool) */
    GR_KX_INDEX,     /* loop index: which < n_outer: o[which]; which >= GR_KIDX_INNER: r[which - GR_KIDX_INNER];
                        which == GR_KIDX_LINEAR: row-major linear index of the outer point */
    GR_KX_PARAM,     /* value of scalar / shape param `param` */
    GR_KX_LOAD,      /* load from buffer param `param` at `access` */
    GR_KX_ACC,       /* accumulator of REDUCE stage `which` */
    GR_KX_UNARY,     /* fn(a) */
    GR_KX_BINARY,    /* fn(a, b) */
    GR_KX_SELECT,    /* a ? b : c */
    GR_KX_CAST,      /* convert a to dtype */
    GR_KX_RANDOM,    /* uniform [0,1) from seed i and counter value(a) (an int64 node); f32 or f64; see above */
} gr_kexpr_op;

#define GR_KIDX_INNER 16
#define GR_KIDX_LINEAR 32

/* Unary functions: one row each in codegen/kunary.def. */
typedef enum {
#define GR_KU_HAND(id, name) GR_KU_##id,
#define GR_KU_EXPR(id, name, expr) GR_KU_##id,
#include "codegen/kunary.def"
#undef GR_KU_HAND
#undef GR_KU_EXPR
    GR_KU_COUNT
} gr_kunary;
/* Names of the unary functions ("neg", ... as in kunary.def), for printing. */
extern const char *const gr_kunary_names[GR_KU_COUNT];

typedef enum {
    GR_KB_ADD = 0, GR_KB_SUB, GR_KB_MUL, GR_KB_DIV, GR_KB_POW, GR_KB_MIN, GR_KB_MAX,
    GR_KB_EQ, GR_KB_LT, GR_KB_LE, GR_KB_GT, GR_KB_GE, GR_KB_AND, GR_KB_OR, GR_KB_MOD,
    GR_KB_COUNT
} gr_kbinary;
/* Comparisons and AND/OR produce bool. DIV on integers truncates toward zero
 * (C semantics); MOD is C's %. MIN/MAX propagate NaN. SELU uses ONNX's default
 * alpha/gamma; GELU is the exact erf form, GELU_TANH the tanh approximation. */

typedef enum { GR_KR_SUM = 0, GR_KR_MAX, GR_KR_MIN, GR_KR_PROD, GR_KR_COUNT } gr_kreduce;

typedef struct {
    int64_t offset;
    int64_t stride[GR_MAX_DIMS];       /* per outer dim */
    int64_t inner_stride[GR_MAX_DIMS]; /* per inner dim */
    int32_t index;                     /* expression node giving a gather index, or -1 */
    int64_t index_stride;
    int64_t index_extent;
    int32_t origin;                    /* gather / scatter: the IR node it lowers (for messages), -1 if none;
                                          no effect on code, hashes or equality */
} gr_kaccess;

typedef struct {
    gr_kexpr_op op;
    gr_dtype dtype;  /* result type */
    int32_t fn;      /* gr_kunary / gr_kbinary */
    int32_t a, b, c; /* operand nodes (indices smaller than this node's) */
    int32_t which;   /* INDEX: loop index id; ACC: stage id; CONST: origin (-1: none; kir.c) */
    int32_t param;   /* PARAM / LOAD: parameter index */
    double f;        /* CONST (float) */
    int64_t i;       /* CONST (int/bool), RANDOM seed */
    gr_kaccess access; /* LOAD */
} gr_kexpr;

typedef enum { GR_KS_REDUCE = 0, GR_KS_STORE } gr_kstage_kind;

typedef struct {
    gr_kstage_kind kind;
    int32_t value;        /* expression node */
    gr_kreduce reduce;    /* REDUCE */
    bool over_inner;      /* STORE: walks the inner space */
    int32_t param;        /* STORE: buffer param */
    gr_kaccess access;    /* STORE (index >= 0: a scatter store, see above) */
} gr_kstage;

typedef struct gr_kernel {
    char name[64];             /* unique in a plan; a C identifier */
    int n_params;
    gr_kparam params[GR_KMAX_PARAMS];
    int n_outer, n_inner;
    int64_t outer[GR_MAX_DIMS];
    int64_t inner[GR_MAX_DIMS];
    int32_t n_points_param;    /* SHAPE param holding prod(outer) (the launch bound), or -1 */
    int n_stages;
    gr_kstage stages[GR_KMAX_STAGES];
    GR_VEC(gr_kexpr) nodes;    /* topological order */
    int source_node;           /* IR node that produced it (first of a fused group), -1 if none */
    /* bit d: outer (inner) dim d is symbolic in the model (ir.h, var_dims): 1 at this binding
     * perhaps, larger at another. Decisions that depend on a dim being 1 (layout classes,
     * fusion, folding copies into matmuls) treat such a dim as larger, so every binding of a
     * symbolic model gets kernels of the same structures. Not hashed: the layout words that
     * it decides are. */
    uint32_t var_outer, var_inner;
} gr_kernel;

/* ---- building (used by lowering and fusion) -------------------------------------- */
gr_status gr_kernel_create(const char *name, gr_kernel **out);
void gr_kernel_destroy(gr_kernel *k);
gr_status gr_kernel_clone(const gr_kernel *k, gr_kernel **out);
/* Adds a parameter; returns its index in *out. */
gr_status gr_kernel_add_param(gr_kernel *k, gr_kparam_kind kind, gr_dtype t, const char *name, int *out);
/* Appends an expression node; returns its index in *out. */
gr_status gr_kernel_add_expr(gr_kernel *k, const gr_kexpr *e, int *out);
/* Convenience constructors (each appends one node). */
gr_status gr_kx_const_f(gr_kernel *k, gr_dtype t, double v, int *out);
/* Constants made on this thread from now on carry their origin (on) or none (off): see kir.c.
 * The pipeline turns it on around the lowering and fusion of a symbolic model's binding. */
void gr_kx_const_origins(bool on);
gr_status gr_kx_const_i(gr_kernel *k, gr_dtype t, int64_t v, int *out);
gr_status gr_kx_index(gr_kernel *k, int which, int *out);
gr_status gr_kx_param(gr_kernel *k, int param, int *out);
gr_status gr_kx_load(gr_kernel *k, int param, const gr_kaccess *acc, int *out);
gr_status gr_kx_acc(gr_kernel *k, int stage, gr_dtype t, int *out);
gr_status gr_kx_unary(gr_kernel *k, gr_kunary fn, gr_dtype t, int a, int *out);
gr_status gr_kx_binary(gr_kernel *k, gr_kbinary fn, gr_dtype t, int a, int b, int *out);
gr_status gr_kx_select(gr_kernel *k, gr_dtype t, int cond, int a, int b, int *out);
gr_status gr_kx_cast(gr_kernel *k, gr_dtype t, int a, int *out);
gr_status gr_kernel_add_stage(gr_kernel *k, const gr_kstage *s);
void gr_kaccess_init(gr_kaccess *a); /* zero strides, index = -1 */
bool gr_kaccess_equal(const gr_kaccess *a, const gr_kaccess *b);

int64_t gr_kernel_points(const gr_kernel *k);  /* prod(outer) */
int64_t gr_kernel_inner_points(const gr_kernel *k); /* prod(inner), 1 if none */
/* Whether a store stage of k scatters (its access has an index). */
bool gr_kernel_scatters(const gr_kernel *k);
/* Checks node operand order, param kinds, stage rules. */
gr_status gr_kernel_verify(const gr_kernel *k);
/* Human-readable listing, for `graft dump` and failing tests. */
gr_status gr_kernel_print(const gr_kernel *k, gr_strbuf *sb);
/* Stable hash of everything that affects generated code. */
uint64_t gr_kernel_hash(const gr_kernel *k);

/* ---- shape-generic form (kir-generic.c) ---------------------------------------------------
 * A kernel lowered at two bindings of a symbolic model differs only in numbers: extents,
 * strides, offsets, gather index strides/extents, the point counts, and constants (a
 * mean's 1/count is one). Those are the kernel's *slots*; everything else is its
 * *structure*: parameters (kind, dtype, written), dims counts, n_points_param, stages,
 * expression ops/dtypes/operands, RANDOM seeds, and each access's layout class: whether
 * its outer walk is contiguous row-major (address = offset + linear index), likewise its
 * inner walk, and which of its other strides are zero (broadcast). Layout classes are
 * structure because they do not change with a dim's size, only with its being 1; a dim
 * that is symbolic in the model (var_outer / var_inner) counts as larger even where it
 * is 1, so seq 1 and batch 1 share the structures of longer bindings. A stride that is
 * a product of symbols can still equal the row-major stride only because a factor is 1
 * at this binding; such a binding gets a structure of its own (correct, not shared).
 *
 * Generic code reads every slot from an array passed at launch, so kernels of one
 * structure share one compiled function (render-cuda.h, GR_RENDER_GENERIC) and the
 * simulator one template kernel. Slot order is fixed by the structure (gr_kslot_map). */

/* The row class of k, structure (hashed): 0 when k has no inner dims or one of them is symbolic
 * in the model (var_inner: the row length differs between bindings); else GR_ROW_FIXED with
 * GR_ROW_WARP when the row has at most 1024 points (render-cuda's warp-row form), GR_ROW_MUL8 /
 * GR_ROW_MUL4 when its length is a multiple of 8 / 4 (whole vector chunks). Generic code of a
 * fixed row length renders only the form and version that length takes (render-cuda.c): all of
 * them made a generic layer norm's code 5 bodies long, and each launch among other kernels paid
 * for fetching it (bench/kmicro, H100). */
#define GR_ROW_WARP_MAX 1024 /* the longest row of the warp-row form */
#define GR_ROW_FIXED 1u
#define GR_ROW_WARP 2u
#define GR_ROW_MUL8 4u
#define GR_ROW_MUL4 8u
unsigned gr_kernel_row_class(const gr_kernel *k);

/* Slots of one access, as indices into the slot array (-1: not a slot). */
typedef struct {
    bool lin;                     /* outer walk contiguous: offset + linear outer index (no strides) */
    bool ri;                      /* inner walk contiguous: + linear inner index */
    int offset;
    int stride[GR_MAX_DIMS];      /* non-zero outer strides when !lin */
    int inner_stride[GR_MAX_DIMS];/* non-zero inner strides when !ri */
    int index_extent, index_stride; /* gathers */
    int n;                        /* slots of this access */
} gr_kaccess_slots;

/* Where each slot of a kernel sits. */
typedef struct {
    int n;                        /* slots in all */
    int points;                   /* prod(outer), or -1 when the n_points_param argument gives it */
    int outer[GR_MAX_DIMS];       /* outer extents */
    int inner[GR_MAX_DIMS];       /* inner extents */
    int inner_points;             /* prod(inner), or -1 without inner dims */
    int *node;                    /* per expression node: first slot of a CONST / LOAD, else -1 */
    int stage[GR_KMAX_STAGES];    /* per STORE stage: first slot of its access, else -1 */
    int node_cap;                 /* entries allocated in node */
} gr_kslot_map;

/* Most slots a generic kernel may take: with GR_KMAX_PARAMS 8-byte parameters they
 * fit CUDA's 4 KB of kernel parameters ((4096 - 32 * 8) / 8). A kernel with more is
 * compiled literally (the devices count it as a fallback). */
#define GR_KMAX_SLOTS 480

/* Contiguous row-major walks (dims of extent 1 are ignored, their index is always 0, unless
 * symbolic: var_outer / var_inner). */
bool gr_kaccess_outer_contiguous(const gr_kernel *k, const gr_kaccess *a);
bool gr_kaccess_inner_contiguous(const gr_kernel *k, const gr_kaccess *a);
/* Slots of access a whose first slot is `first` (layout as in gr_kslot_map_build). */
void gr_kaccess_slot_layout(const gr_kernel *k, const gr_kaccess *a, int first, gr_kaccess_slots *out);
/* Number of slots of k (no allocation). */
int gr_kernel_slot_count(const gr_kernel *k);
gr_status gr_kslot_map_build(const gr_kernel *k, gr_kslot_map *m);
void gr_kslot_map_free(gr_kslot_map *m);
/* The slot values of k (m->n of them, m built from k or a kernel of the same structure).
 * f32 constants travel as the bits of their float, other float constants as the bits
 * of their double, integers as themselves. */
void gr_kernel_slot_values(const gr_kernel *k, const gr_kslot_map *m, int64_t *vals);
/* Writes slot values into k (the inverse): extents, strides, offsets, constants;
 * the strides of contiguous walks are set row-major from the new extents. */
void gr_kernel_apply_slots(gr_kernel *k, const gr_kslot_map *m, const int64_t *vals);
/* Hash of the structure (gr_kernel_hash ignoring every slot); equal structures hash equal. */
uint64_t gr_kernel_structure_hash(const gr_kernel *k);
/* A kernel's structure as the words gr_kernel_structure_hash hashes, with that hash. A device
 * keeps one per template (module) it shares between kernels of one structure: finding a new
 * kernel's template then walks the kernel once (hash and words from one pass, compared with
 * memcmp), where hash + gr_kernel_structure_equal walked it twice and the template once more
 * for every kernel a new binding's plan prepares. */
typedef struct {
    uint64_t hash; /* == gr_kernel_structure_hash(k) */
    int len;
    uint64_t *words; /* len words, owned (gr_kstructure_free) */
} gr_kstructure;
gr_status gr_kstructure_of(const gr_kernel *k, gr_kstructure *out);
bool gr_kstructure_equal(const gr_kstructure *a, const gr_kstructure *b);
void gr_kstructure_free(gr_kstructure *s);
/* Whether a and b have the same structure (exact, not by hash). */
gr_status gr_kernel_structure_equal(const gr_kernel *a, const gr_kernel *b, bool *out);
/* A kernel computing what k computes, built from template t of the same structure:
 * t's code with k's slot values, and k's name, parameter names, source node and
 * gather origins (for messages). GR_ERR_INVALID when the structures differ. */
gr_status gr_kernel_instantiate(const gr_kernel *t, const gr_kernel *k, gr_kernel **out);
/* The same where the caller has just established gr_kernel_structure_equal(t, k) (a device's
 * template lookup): the structures are not compared a second time. */
gr_status gr_kernel_instantiate_same(const gr_kernel *t, const gr_kernel *k, gr_kernel **out);

/* RANDOM's 64 bits for a seed and counter (the definition at the top of this file); the
 * interpreter and host code that must draw the same numbers (seeded sampling) share it. */
uint64_t gr_kernel_random_bits(uint64_t seed, uint64_t counter);

/* ---- reference interpreter ----------------------------------------------------------------
 * Runs the kernel on host memory (BUFFER args are host pointers; a
 * BUFFER_INDIRECT arg points at a slot holding the buffer pointer). Before
 * running, `check` (optional) is called once per buffer param with the byte
 * range [lo, hi) the kernel may touch relative to the buffer's base; a
 * non-OK return aborts the launch with that status. Gather indices outside
 * their extent are GR_ERR_INVALID naming the kernel. */
typedef gr_status (*gr_kcheck_fn)(void *user, int param, const void *base, int64_t lo, int64_t hi, bool write);
gr_status gr_kernel_interpret(const gr_kernel *k, const gr_karg *args, int n_args, gr_kcheck_fn check, void *user);
/* Byte range [lo, hi) the kernel touches through buffer param p (lo == hi: none). */
void gr_kernel_param_range(const gr_kernel *k, int p, int64_t *lo, int64_t *hi);

/* ---- library calls ---------------------------------------------------------------------
 * Batched matmul: for each batch b:  C[b] = alpha * op(A[b]) @ op(B[b]) + bias  (+ beta*C)
 * op(X) = X^T when trans. Row-major. Batch offsets in elements. bias (optional)
 * is broadcast along rows: bias[n] (bias_kind ROW) or a full tensor of C's shape. */
/* Collectives (tensor parallelism, passes/shard.c): every rank of the device's communicator
 * calls them in the same order. GR_LIB_ALL_REDUCE: C[i] = sum over ranks of A[i], i < m
 * (the sum in rank order on the simulator). GR_LIB_ALL_GATHER: C[r*m + i] = rank r's A[i]
 * (ranks stacked along a new leading axis). n = the number of ranks, dtype the element
 * type; args as a matmul's: [0]=A [2]=C, [1] and [3] unused. */
/* GR_LIB_SAMPLE: one token per row of logits (decode sampling, codegen/sample.c): m rows of n
 * logits (dtype), args [0]=logits [1]=step (i64 [1]) [2]=out (i64 [m]) [3]=ints (i64 [3]: seed,
 * first step, top_k) [4]=floats (f32 [2]: temperature, top_p). Row r draws with the counter
 * (step - first) * m + r; the semantics are gr_sample_row's. */
/* GR_LIB_BEAM_STEP: one beam-search step for m batch rows (codegen/beam.c, gr_beam_step_row on
 * each): k = beams, n = vocab, lda = the room of a sequence (gr_beam_params.stride), dtype the
 * logits'; args [0]=logits [m * k, vocab] [1]=step (i64 [1]: kv_len) [2]=out state (i64 [m,
 * gr_beam_state_slots]) [3]=in state (the same shape; may be args[2] itself) [4]=params (i64
 * [GR_BEAM_NPARAMS]). The state layout is gr_beam_state_layout's.
 * GR_LIB_BEAM_REORDER: a KV cache's rows gathered by beam: x viewed as [m, n, k, lda] (rows,
 * the axes before the cache axis, the cache axis, the elements after it), y[r, a, p, e] =
 * x[rows[r], a, p, e] for p < kv_len + ldb (the valid prefix), 0 past it; args [0]=x [1]=rows
 * (i64 [m], each in [0, m)) [2]=y [3]=kv_len (i64 [1]). y never aliases x. */
typedef enum {
    GR_LIB_MATMUL = 0,
    GR_LIB_ATTENTION,
    GR_LIB_ALL_REDUCE,
    GR_LIB_ALL_GATHER,
    GR_LIB_SAMPLE,
    GR_LIB_BEAM_STEP,
    GR_LIB_BEAM_REORDER,
    GR_LIB_COUNT
} gr_lib_kind;
static inline bool gr_lib_is_collective(gr_lib_kind k) { return k == GR_LIB_ALL_REDUCE || k == GR_LIB_ALL_GATHER; }
/* Matmul epilogues, applied to alpha*AB + bias in the accumulation precision before the one
 * rounding to C's dtype. GELU is the exact erf form, GELU_TANH the tanh approximation
 * 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) (passes/epilogue.c fuses it). Append-only. */
typedef enum { GR_EPI_NONE = 0, GR_EPI_RELU, GR_EPI_GELU, GR_EPI_GELU_TANH, GR_EPI_COUNT } gr_epilogue;
/* "none", "relu", "gelu", "gelu_tanh" (the matmul node's `epilogue` attribute); "?" out of range. */
const char *gr_epilogue_name(gr_epilogue e);
/* The epilogue named `name` (gr_epilogue_name's names): false when unknown. */
bool gr_epilogue_parse(const char *name, gr_epilogue *out);
typedef enum { GR_BIAS_NONE = 0, GR_BIAS_ROW, GR_BIAS_FULL } gr_bias_kind;

typedef struct {
    gr_lib_kind kind;
    gr_dtype dtype;           /* A, B, C element type */
    int64_t m, n, k;
    int64_t batch;
    bool trans_a, trans_b;
    int64_t lda, ldb, ldc;    /* leading dims (row-major) */
    int64_t batch_stride_a, batch_stride_b, batch_stride_c; /* 0 = broadcast */
    double alpha;
    gr_bias_kind bias;
    int64_t batch_stride_bias;
    gr_epilogue epilogue;
    /* residual: args[4] is a tensor of C's layout (ldc, batch_stride_c) added before the
     * epilogue: C = epilogue(alpha*AB + bias + R) (cuBLASLt: R is its C with beta = 1). Only
     * with bias NONE or ROW (a FULL bias takes that place). */
    bool residual;
    /* GR_LIB_ATTENTION (alpha is the scale, batch the batch): for each batch b, head h and
     * query row i, O[b,h,i] = softmax_j(alpha * Q[b,h,i].K[b,h/g,j] + mask[b,h,i,j]) V[b,h/g,j]
     * with g = heads / kv_heads (grouped-query heads share K and V). Q [batch, heads, seq_q,
     * head_dim], K [batch, kv_heads, seq_k, head_dim], V [batch, kv_heads, seq_k, head_dim_v],
     * O [batch, heads, seq_q, head_dim_v]. Each of Q, K, V and O is read (written) through
     * its strides x_stride[3] = elements between consecutive batch, head and sequence
     * positions (head_dim is contiguous, stride 1), from its argument pointer, which the step
     * argument's elem_offset has already moved to the first element: Q[b,h,i,d] =
     * q[b*q_stride[0] + h*q_stride[1] + i*q_stride[2] + d], K and V indexed by the kv head.
     * gr_libcall_attention_dense sets the dense [B,H,S,D] strides; lowering sets others to
     * read a [B,S,H,D] tensor, or the column slice of a fused projection, in place
     * (lower-gen.c). Strides are non-negative. mask (optional, mask_dtype)
     * is read at b*mask_stride[0] + h*mask_stride[1] + i*mask_stride[2] + j*mask_stride[3]
     * (stride 0 = broadcast). causal: key j is visible to query i when j <= i + seq_k - seq_q
     * (aligned at the bottom right, as for a query block at the end of a cache). A row that
     * sees no key (or only -inf) is 0. */
    int64_t heads, kv_heads, seq_q, seq_k, head_dim, head_dim_v;
    bool causal;
    bool has_mask;
    gr_dtype mask_dtype;
    int64_t mask_stride[4];
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* batch, head, seq (elements) */
    /* Mask work shared by the attention calls of one plan segment that read the same mask
     * value (passes/share.c): mask_group 0, the call works alone (the default); g in
     * 1..GR_ATTN_MASK_GROUPS, the group's first call (mask_group_first) does what a device
     * derives from the mask (CUDA: its tile table) and keeps it for the group's later calls,
     * which reuse it when the mask's address and geometry match and redo it otherwise. A
     * device may ignore the fields: the result is the same. */
    int8_t mask_group;
    bool mask_group_first;
    /* Shape policy generic (runtime/generic.c): the call's lengths come from device memory at
     * run time. args[5] points at GR_ATTN_LENS int64 values (gr_libcall_attention_lens) that
     * replace seq_q, seq_k and every stride above; the fields themselves are the largest the
     * call may see (a bucket's: grids and tables are sized for them) and the record's lengths
     * are no larger. */
    bool lens_arg;
    /* The number of visible keys comes from device memory (parameter indirection for a KV
     * cache of a maximum length, passes/attention.c's key-length form): args[5] points at one
     * int64 L, and key j is visible only when j < L as well (L clamped to [0, seq_k]; the
     * causal rule keeps its alignment to seq_k). Only keys below L are read. */
    bool key_len_arg;
    char name[64];
} gr_libcall;
/* The length record of an attention (lens_arg): seq_q, seq_k, then q, k, v and o strides
 * (batch, head, seq each), then the mask strides (4). */
enum { GR_ATTN_LENS_SQ = 0, GR_ATTN_LENS_SK, GR_ATTN_LENS_Q, GR_ATTN_LENS_K = 5, GR_ATTN_LENS_V = 8, GR_ATTN_LENS_O = 11,
       GR_ATTN_LENS_MASK = 14, GR_ATTN_LENS = 18 };
/* Writes c's lengths and strides into rec (GR_ATTN_LENS values). */
void gr_libcall_attention_lens(const gr_libcall *c, int64_t *rec);
/* c with rec's lengths and strides (rec as gr_libcall_attention_lens writes it); lens_arg cleared. */
void gr_libcall_attention_use_lens(gr_libcall *c, const int64_t *rec);
#define GR_ATTN_MASK_GROUPS 8
/* Sets the dense [batch, heads, seq, head_dim] strides of Q, K, V and O from c's sizes: the
 * one place every maker of an attention call starts from. */
void gr_libcall_attention_dense(gr_libcall *c);
/* launch args of a matmul: [0]=A [1]=B [2]=C [3]=bias (or NULL) [4]=residual (or NULL) */
#define GR_LIB_MATMUL_NARGS 5
/* launch args of an attention: [0]=Q [1]=K [2]=O [3]=V [4]=mask (or NULL), then [5]=the key
 * length (only with key_len_arg), then the length record (only with lens_arg; always the last:
 * gr_libcall_attention_lens_index). Every library
 * call writes its args[2] and only that (memory planning and fusion rely on it). */
#define GR_LIB_ATTENTION_NARGS 5
#define GR_LIB_ATTENTION_KEY_LEN 5
/* launch args of a sample: [0]=logits [1]=step [2]=out [3]=ints [4]=floats (GR_LIB_SAMPLE above) */
#define GR_LIB_SAMPLE_NARGS 5
/* launch args of a beam step and of a beam reorder (GR_LIB_BEAM_STEP, GR_LIB_BEAM_REORDER above) */
#define GR_LIB_BEAM_STEP_NARGS 5
#define GR_LIB_BEAM_REORDER_NARGS 4
/* launch args of an all-reduce / all-gather: [0]=in [1]=unused [2]=out [3]=unused */
#define GR_LIB_COLLECTIVE_NARGS 4
#define GR_LIB_MAX_NARGS 7
/* Number of launch args of a call of this kind. */
static inline int gr_libcall_nargs(const gr_libcall *c) {
    return c->kind == GR_LIB_ATTENTION ? GR_LIB_ATTENTION_NARGS + (c->key_len_arg ? 1 : 0) + (c->lens_arg ? 1 : 0)
           : c->kind == GR_LIB_SAMPLE  ? GR_LIB_SAMPLE_NARGS
           : c->kind == GR_LIB_BEAM_STEP ? GR_LIB_BEAM_STEP_NARGS
           : c->kind == GR_LIB_BEAM_REORDER ? GR_LIB_BEAM_REORDER_NARGS
           : gr_lib_is_collective(c->kind) ? GR_LIB_COLLECTIVE_NARGS
                                       : GR_LIB_MATMUL_NARGS;
}

/* The argument index of an attention's length record (lens_arg). */
static inline int gr_libcall_attention_lens_index(const gr_libcall *c) {
    return GR_LIB_ATTENTION_NARGS + (c->key_len_arg ? 1 : 0);
}

/* Reference implementation on host memory (f64 accumulation for f32/f64,
 * f32 accumulation for f16/bf16). Used by the simulator. */
gr_status gr_libcall_reference(const gr_libcall *c, const gr_karg *args);
/* The attention kind of it: scores, softmax and the weighted sum in double, one row at a
 * time (no score matrix of the whole head is kept). */
gr_status gr_libcall_attention_reference(const gr_libcall *c, const gr_karg *args);
/* The sample kind of it: gr_sample_row on every row (args as GR_LIB_SAMPLE says). */
gr_status gr_libcall_sample_reference(const gr_libcall *c, const gr_karg *args);
/* The beam kinds of it (codegen/beam.c; args as GR_LIB_BEAM_STEP / GR_LIB_BEAM_REORDER say). */
gr_status gr_libcall_beam_step_reference(const gr_libcall *c, const gr_karg *args);
gr_status gr_libcall_beam_reorder_reference(const gr_libcall *c, const gr_karg *args);

/* ---- sampling (codegen/sample.c) --------------------------------------------------------
 * One token from one row of `vocab` logits (f32, f16, bf16 or f64), the ONE definition that
 * the host reference engine (runtime/generate.c), the simulator (GR_LIB_SAMPLE) and the CUDA
 * kernel (device/cuda/cuda-sample.c) implement:
 *   z_v = (float)logit_v / temperature, in f32 (-0 as +0, a NaN as -inf); m = max z;
 *   w_v = 1 where z_v == m, else expf(z_v - m); q_v = floor(w_v * 2^32), an integer weight
 *       (sums are exact and order-free, so a parallel reduction gives the same bits);
 *   top-k (0 < top_k < vocab): keep z_v >= the top_k-th largest z (ties with it stay);
 *   top-p (top_p < 1): among those, keep z_v >= c for the largest c whose kept weight
 *       sum_{z_v >= c} q_v reaches top_p * (the kept sum) (compared in double; ties stay);
 *   draw: with T the kept sum and x = floor(bits * T / 2^64) (so x < T), the first token in
 *       id order whose running sum of kept q_v exceeds x.
 * The most likely token is always kept and has q = 2^32, so the draw always succeeds. Work:
 * O(vocab) per pass, at most 11 passes (radix selection of both thresholds, 8 bits a pass),
 * no memory. */
typedef struct {
    float temperature; /* > 0 */
    int64_t top_k;     /* 0 (or >= vocab): no top-k */
    float top_p;       /* (0, 1]; 1: no top-p */
} gr_sample_params;
int64_t gr_sample_row(const void *logits, gr_dtype dtype, int64_t vocab, const gr_sample_params *p, uint64_t bits);
/* The RNG bits of row r at counter c: gr_kernel_random_bits(seed, c). */
static inline uint64_t gr_sample_bits(uint64_t seed, uint64_t counter) { return gr_kernel_random_bits(seed, counter); }

/* ---- beam search (codegen/beam.c) -------------------------------------------------------
 * One step of Hugging Face's generate(num_beams=k, do_sample=False, early_stopping=True) for
 * one batch row, the ONE definition the host reference engine runs (and a device beam-step op
 * is to run): with the k running beams' scores s_i and the last logits x_i of each beam,
 *   c_{i,v} = (float)(s_i + (float)(x_{i,v} - logsumexp(x_i)))  (f32 sum; a NaN as -inf);
 *   the top 2k of the k x vocab c, by score descending, lowest flat index i * vocab + v on ties;
 *   among the first k of them, an EOS candidate (and, at the last step, every candidate) is a
 *   finished hypothesis of score c / (j + 1) ** length_penalty, kept when it beats the worst of
 *   the k kept ones (which start at GR_BEAM_EMPTY; existing ones win ties); the row is done
 *   once it holds k hypotheses (and then keeps no more);
 *   the best k non-EOS candidates are the new beams (src: the beam each continues, tok: its
 *   token, its score c); with fewer than k, the rest are dead: src 0, tok pad_id (0 when < 0),
 *   score GR_BEAM_EMPTY.
 * Work O(k vocab log k) and O(k max_new) copying; scratch of gr_beam_scratch_bytes. */
#define GR_BEAM_EMPTY (-1.0e9f)
typedef struct {
    int64_t beams;         /* k >= 1 */
    int64_t vocab;         /* >= 1 */
    int64_t max_new;       /* N: the number of new tokens (the last step is j = N - 1) */
    int64_t stride;        /* the room of a sequence and of a hypothesis (>= N; 0: N) */
    int64_t eos_id;        /* < 0: none */
    int64_t pad_id;        /* the token of dead beams and of the result past its end (may be < 0) */
    double length_penalty; /* finite */
} gr_beam_params;
typedef struct { /* one batch row's state, caller-owned flat arrays */
    float *score;        /* [k] running beams' scores */
    int64_t *seqs;       /* [k * N] running beams' tokens */
    float *hyp_score;    /* [k] finished hypotheses' scores (GR_BEAM_EMPTY: none) */
    int64_t *hyp_len;    /* [k] */
    int64_t *hyp_tok;    /* [k * N] */
    uint8_t *done;       /* [1] */
} gr_beam_row;
gr_status gr_beam_scratch_bytes(const gr_beam_params *p, size_t *bytes);
/* before the first step: beam 0 at score 0, the others (and every hypothesis) empty */
void gr_beam_row_init(const gr_beam_params *p, const gr_beam_row *row);
/* step j (0-based new-token index): logits are k rows of vocab (f32, f16, bf16 or f64), beam i's
 * at row i; writes src[k] and tok[k] and updates row (sequences through j) */
void gr_beam_step_row(const void *logits, gr_dtype dtype, const gr_beam_params *p, int64_t j, const gr_beam_row *row, int64_t *src,
                      int64_t *tok, void *scratch);
/* after `steps` steps: the best hypothesis' tokens, pad_id past its end (beam 0's sequence when
 * the row holds none), N of them into out */
void gr_beam_row_result(const gr_beam_params *p, const gr_beam_row *row, int64_t steps, int64_t *out);

/* ---- the beam state on a device (the beam_step op, ir/ops.c) ------------------------------
 * One batch row's state as i64 slots, so that graph ops can slice the tokens, the cache rows
 * and the done flag out of it: tok [k] (the next tokens), src [k] (the cache row each new beam
 * continues: row * k + beam), done (0/1 in the slot's low byte; the others stay 0), done_step
 * (the step count j + 1 at which the row became done, 0 before), score [k] and hyp_score [k]
 * (k slots each, holding k floats packed from the first), hyp_len [k], seqs [k * stride],
 * hyp_tok [k * stride], then the scratch of gr_beam_step_row (its bytes, rounded up to slots).
 * A state that is not one of these (a device kernel cannot report) is never produced by graft:
 * the host writes it with gr_beam_state_init and only the op changes it. */
/* the most beams the device kernels take (cuda-beam.c keeps 2k candidates per thread); the
 * rewritten engine refuses more on every device alike */
#define GR_BEAM_DEVICE_MAX_BEAMS 16
#define GR_BEAM_NPARAMS 5 /* params: first kv_len (the prompt length), eos, pad, length_penalty's bits, max_new */
typedef struct {
    int64_t tok, src, done, done_step, score, hyp_score, hyp_len, seqs, hyp_tok, scratch, slots;
} gr_beam_layout;
/* slot offsets for p (beams, stride or max_new, vocab); GR_ERR_INVALID when out of range */
gr_status gr_beam_state_layout(const gr_beam_params *p, gr_beam_layout *l);
/* row b's view of a state row (slots of l) */
gr_beam_row gr_beam_state_row(int64_t *state_row, const gr_beam_layout *l);
/* a fresh state for `rows` batch rows: gr_beam_row_init, src = the row's own cache rows, no tokens */
void gr_beam_state_init(const gr_beam_params *p, const gr_beam_layout *l, int64_t rows, int64_t *state);

#endif
