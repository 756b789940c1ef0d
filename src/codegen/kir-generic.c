/* codegen/kir-generic — the shape-generic form of a kernel (kir.h): its slots
 * (the numbers that change with the shape) and its structure (everything else).
 *
 * One place fixes the slot order (assign below): the CUDA renderer reads slot
 * indices from the map, the devices fill the values with gr_kernel_slot_values,
 * and the simulator writes them back into a template with gr_kernel_apply_slots,
 * so the three cannot disagree. */
#include "codegen/kir.h"
#include <string.h>

/* ==== layout classes ======================================================================== */

bool gr_kaccess_outer_contiguous(const gr_kernel *k, const gr_kaccess *a) {
    int64_t want = 1;
    for (int d = k->n_outer - 1; d >= 0; d--) {
        if ((k->outer[d] != 1 || (k->var_outer >> d & 1)) && a->stride[d] != want) return false;
        want *= k->outer[d];
    }
    return true;
}

bool gr_kaccess_inner_contiguous(const gr_kernel *k, const gr_kaccess *a) {
    int64_t want = 1;
    for (int d = k->n_inner - 1; d >= 0; d--) {
        if ((k->inner[d] != 1 || (k->var_inner >> d & 1)) && a->inner_stride[d] != want) return false;
        want *= k->inner[d];
    }
    return true;
}

/* The address forms render-cuda uses: `+ lin` needs outer dims, `+ ri` inner dims. */
static bool uses_lin(const gr_kernel *k, const gr_kaccess *a) {
    return k->n_outer > 0 && gr_kaccess_outer_contiguous(k, a);
}
static bool uses_ri(const gr_kernel *k, const gr_kaccess *a) {
    return k->n_inner > 0 && gr_kaccess_inner_contiguous(k, a);
}

void gr_kaccess_slot_layout(const gr_kernel *k, const gr_kaccess *a, int first, gr_kaccess_slots *out) {
    memset(out, 0, sizeof *out);
    out->lin = uses_lin(k, a);
    out->ri = uses_ri(k, a);
    out->index_extent = out->index_stride = -1;
    for (int d = 0; d < GR_MAX_DIMS; d++) out->stride[d] = out->inner_stride[d] = -1;
    int s = first;
    out->offset = s++;
    if (!out->lin)
        for (int d = 0; d < k->n_outer; d++)
            if (a->stride[d] != 0) out->stride[d] = s++;
    if (k->n_inner > 0 && !out->ri)
        for (int d = 0; d < k->n_inner; d++)
            if (a->inner_stride[d] != 0) out->inner_stride[d] = s++;
    if (a->index >= 0) {
        out->index_extent = s++;
        out->index_stride = s++;
    }
    out->n = s - first;
}

/* ==== slot map ================================================================================ */

/* The slot order: points, outer extents, inner extents, inner points, then every CONST
 * and LOAD node in node order, then every STORE stage. node may be NULL (counting). */
static void assign(const gr_kernel *k, gr_kslot_map *m, int *node) {
    int s = 0;
    m->points = k->n_points_param >= 0 ? -1 : s++;
    for (int d = 0; d < GR_MAX_DIMS; d++) m->outer[d] = m->inner[d] = -1;
    for (int d = 0; d < k->n_outer; d++) m->outer[d] = s++;
    for (int d = 0; d < k->n_inner; d++) m->inner[d] = s++;
    m->inner_points = k->n_inner > 0 ? s++ : -1;
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        int first = -1;
        if (e->op == GR_KX_CONST) {
            first = s++;
        } else if (e->op == GR_KX_LOAD) {
            gr_kaccess_slots as;
            first = s;
            gr_kaccess_slot_layout(k, &e->access, first, &as);
            s += as.n;
        }
        if (node) node[i] = first;
    }
    for (int j = 0; j < GR_KMAX_STAGES; j++) m->stage[j] = -1;
    for (int j = 0; j < k->n_stages && j < GR_KMAX_STAGES; j++) {
        if (k->stages[j].kind != GR_KS_STORE) continue;
        gr_kaccess_slots as;
        m->stage[j] = s;
        gr_kaccess_slot_layout(k, &k->stages[j].access, s, &as);
        s += as.n;
    }
    m->n = s;
}

int gr_kernel_slot_count(const gr_kernel *k) {
    gr_kslot_map m;
    memset(&m, 0, sizeof m);
    assign(k, &m, NULL);
    return m.n;
}

gr_status gr_kslot_map_build(const gr_kernel *k, gr_kslot_map *m) {
    memset(m, 0, sizeof *m);
    int n = k->nodes.len > 0 ? k->nodes.len : 1;
    m->node = gr_malloc(sizeof(int) * (size_t)n);
    if (!m->node) return GR_ERR_NOMEM;
    m->node_cap = n;
    assign(k, m, m->node);
    return GR_OK;
}

void gr_kslot_map_free(gr_kslot_map *m) {
    if (m->node) gr_free(m->node, sizeof(int) * (size_t)m->node_cap);
    memset(m, 0, sizeof *m);
}

/* ==== values ===================================================================================== */

static int64_t float_bits(double f) {
    int64_t v;
    memcpy(&v, &f, sizeof v);
    return v;
}

static double bits_float(int64_t v) {
    double f;
    memcpy(&f, &v, sizeof f);
    return f;
}

/* An f32 constant travels as the bits of its float: the code uses it with no f64->f32
 * conversion (a slow instruction, once per constant per thread; measured 9% of an
 * elementwise chain with 41 constants on the H100), and (double)(float)v -> (float) gives
 * back the same float, in the simulator too. Other float dtypes travel as their double
 * (f16/bf16 constants are rounded from the double by the simulator: a float in between
 * could round differently). */
static int64_t const_slot(const gr_kexpr *e) {
    if (e->dtype == GR_F32) {
        float f = (float)e->f;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        return (int64_t)u;
    }
    return gr_dtype_is_float(e->dtype) ? float_bits(e->f) : e->i;
}

static double slot_const(gr_dtype t, int64_t v) {
    if (t != GR_F32) return bits_float(v);
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

static void access_read(const gr_kernel *k, const gr_kaccess *a, int first, int64_t *vals) {
    gr_kaccess_slots as;
    gr_kaccess_slot_layout(k, a, first, &as);
    vals[as.offset] = a->offset;
    for (int d = 0; d < k->n_outer; d++)
        if (as.stride[d] >= 0) vals[as.stride[d]] = a->stride[d];
    for (int d = 0; d < k->n_inner; d++)
        if (as.inner_stride[d] >= 0) vals[as.inner_stride[d]] = a->inner_stride[d];
    if (as.index_extent >= 0) vals[as.index_extent] = a->index_extent;
    if (as.index_stride >= 0) vals[as.index_stride] = a->index_stride;
}

/* Called while k still holds the template's extents, so the layout (a function of the
 * structure, the same for the template and the kernel the slots come from) is read
 * from an untouched kernel; the strides of contiguous walks are set row-major from the
 * new extents in vals. */
static void access_write(const gr_kernel *k, const gr_kslot_map *m, gr_kaccess *a, int first, const int64_t *vals) {
    gr_kaccess_slots as;
    gr_kaccess_slot_layout(k, a, first, &as);
    a->offset = vals[as.offset];
    for (int d = 0; d < k->n_outer; d++)
        if (as.stride[d] >= 0) a->stride[d] = vals[as.stride[d]];
    for (int d = 0; d < k->n_inner; d++)
        if (as.inner_stride[d] >= 0) a->inner_stride[d] = vals[as.inner_stride[d]];
    if (as.index_extent >= 0) a->index_extent = vals[as.index_extent];
    if (as.index_stride >= 0) a->index_stride = vals[as.index_stride];
    /* a dim of extent 1 gets stride 0: its index is always 0, and a store that does not
     * walk the inner space must keep zero inner strides (gr_kernel_verify) */
    int64_t s = 1;
    if (as.lin)
        for (int d = k->n_outer - 1; d >= 0; d--) {
            int64_t ext = vals[m->outer[d]];
            a->stride[d] = ext == 1 ? 0 : s;
            s *= ext;
        }
    s = 1;
    if (as.ri)
        for (int d = k->n_inner - 1; d >= 0; d--) {
            int64_t ext = vals[m->inner[d]];
            a->inner_stride[d] = ext == 1 ? 0 : s;
            s *= ext;
        }
}

void gr_kernel_slot_values(const gr_kernel *k, const gr_kslot_map *m, int64_t *vals) {
    if (m->points >= 0) vals[m->points] = gr_kernel_points(k);
    for (int d = 0; d < k->n_outer; d++) vals[m->outer[d]] = k->outer[d];
    for (int d = 0; d < k->n_inner; d++) vals[m->inner[d]] = k->inner[d];
    if (m->inner_points >= 0) vals[m->inner_points] = gr_kernel_inner_points(k);
    for (int i = 0; i < k->nodes.len && i < m->node_cap; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        if (m->node[i] < 0) continue;
        if (e->op == GR_KX_CONST) vals[m->node[i]] = const_slot(e);
        else if (e->op == GR_KX_LOAD) access_read(k, &e->access, m->node[i], vals);
    }
    for (int j = 0; j < k->n_stages && j < GR_KMAX_STAGES; j++)
        if (m->stage[j] >= 0) access_read(k, &k->stages[j].access, m->stage[j], vals);
}

void gr_kernel_apply_slots(gr_kernel *k, const gr_kslot_map *m, const int64_t *vals) {
    /* accesses first: their layouts are read from k's extents as they were */
    for (int i = 0; i < k->nodes.len && i < m->node_cap; i++) {
        gr_kexpr *e = &k->nodes.data[i];
        if (m->node[i] < 0) continue;
        if (e->op == GR_KX_CONST) {
            if (gr_dtype_is_float(e->dtype)) e->f = slot_const(e->dtype, vals[m->node[i]]);
            else e->i = vals[m->node[i]];
        } else if (e->op == GR_KX_LOAD) {
            access_write(k, m, &e->access, m->node[i], vals);
        }
    }
    for (int j = 0; j < k->n_stages && j < GR_KMAX_STAGES; j++)
        if (m->stage[j] >= 0) access_write(k, m, &k->stages[j].access, m->stage[j], vals);
    for (int d = 0; d < k->n_outer; d++) k->outer[d] = vals[m->outer[d]];
    for (int d = 0; d < k->n_inner; d++) k->inner[d] = vals[m->inner[d]];
}

/* ==== structure ================================================================================= */

/* The structure as a sequence of words: equal sequences, same generic code. */
typedef void (*word_fn)(void *user, uint64_t w);

static void access_words(const gr_kernel *k, const gr_kaccess *a, word_fn w, void *u) {
    w(u, (uint64_t)(int64_t)a->index);
    bool lin = uses_lin(k, a), ri = uses_ri(k, a);
    w(u, (uint64_t)lin | (uint64_t)ri << 1);
    uint64_t zeros = 0; /* which strides are zero (broadcast), where strides are used */
    if (!lin)
        for (int d = 0; d < k->n_outer; d++) zeros |= (uint64_t)(a->stride[d] == 0) << d;
    if (k->n_inner > 0 && !ri)
        for (int d = 0; d < k->n_inner; d++) zeros |= (uint64_t)(a->inner_stride[d] == 0) << (GR_MAX_DIMS + d);
    w(u, zeros);
}

unsigned gr_kernel_row_class(const gr_kernel *k) {
    if (k->n_inner <= 0 || (k->var_inner & ((1u << k->n_inner) - 1u))) return 0;
    int64_t ni = gr_kernel_inner_points(k);
    return GR_ROW_FIXED | (ni <= GR_ROW_WARP_MAX ? GR_ROW_WARP : 0u) | (ni % 8 == 0 ? GR_ROW_MUL8 : 0u) | (ni % 4 == 0 ? GR_ROW_MUL4 : 0u);
}

static void structure_words(const gr_kernel *k, word_fn w, void *u) {
    w(u, 0x67656e65726963ull); /* "generic" */
    w(u, (uint64_t)gr_kernel_row_class(k));
    w(u, (uint64_t)k->n_params);
    for (int p = 0; p < k->n_params; p++)
        w(u, (uint64_t)k->params[p].kind | (uint64_t)k->params[p].dtype << 8 | (uint64_t)k->params[p].written << 16);
    w(u, (uint64_t)k->n_outer | (uint64_t)k->n_inner << 8);
    w(u, (uint64_t)(int64_t)k->n_points_param);
    w(u, (uint64_t)k->nodes.len);
    for (int i = 0; i < k->nodes.len; i++) {
        const gr_kexpr *e = &k->nodes.data[i];
        w(u, (uint64_t)e->op | (uint64_t)e->dtype << 8);
        switch (e->op) {
        case GR_KX_CONST: break; /* the value is a slot */
        case GR_KX_INDEX:
        case GR_KX_ACC: w(u, (uint64_t)(int64_t)e->which); break;
        case GR_KX_PARAM: w(u, (uint64_t)(int64_t)e->param); break;
        case GR_KX_LOAD:
            w(u, (uint64_t)(int64_t)e->param);
            access_words(k, &e->access, w, u);
            break;
        case GR_KX_RANDOM:
            w(u, (uint64_t)e->i);
            w(u, (uint64_t)(int64_t)e->a);
            break;
        default:
            w(u, (uint64_t)(int64_t)e->fn);
            w(u, (uint64_t)(int64_t)e->a);
            w(u, (uint64_t)(int64_t)e->b);
            w(u, (uint64_t)(int64_t)e->c);
            break;
        }
    }
    w(u, (uint64_t)k->n_stages);
    for (int s = 0; s < k->n_stages; s++) {
        const gr_kstage *sg = &k->stages[s];
        w(u, (uint64_t)sg->kind);
        w(u, (uint64_t)(int64_t)sg->value);
        if (sg->kind == GR_KS_REDUCE) {
            w(u, (uint64_t)sg->reduce);
        } else {
            w(u, (uint64_t)sg->over_inner);
            w(u, (uint64_t)(int64_t)sg->param);
            access_words(k, &sg->access, w, u);
        }
    }
}

/* One 64-bit word into the hash: multiply-xorshift per word (a byte-wise FNV-1a cost a quarter
 * of preparing a kernel, and every kernel a new binding's plan prepares is hashed). Structures
 * are compared exactly after a hash match, so the hash only has to spread. test_render pins the
 * result (it names generic modules and keys the CUDA disk cache). */
static void hash_word(void *user, uint64_t v) {
    uint64_t *h = user;
    uint64_t x = (*h ^ v) * 0x9e3779b97f4a7c15ull;
    *h = x ^ (x >> 29);
}

uint64_t gr_kernel_structure_hash(const gr_kernel *k) {
    uint64_t h = 0x6772616674ull; /* "graft" */
    structure_words(k, hash_word, &h);
    return h;
}

/* Words of one structure: in `local` up to its size (most kernels), on the heap past it, so
 * comparing two kernels (every kernel a new binding's plan prepares) allocates nothing. */
#define WORD_BUF_LOCAL 512
typedef struct {
    uint64_t *data;
    int len, cap;
    bool failed;
    uint64_t local[WORD_BUF_LOCAL];
} word_buf;

static void word_buf_init(word_buf *b) {
    b->data = b->local;
    b->len = 0;
    b->cap = WORD_BUF_LOCAL;
    b->failed = false;
}

static void word_buf_free(word_buf *b) {
    if (b->data != b->local) gr_free(b->data, sizeof(uint64_t) * (size_t)b->cap);
}

static void buf_word(void *user, uint64_t v) {
    word_buf *b = user;
    if (b->failed) return;
    if (b->len == b->cap) {
        int cap = 2 * b->cap;
        uint64_t *d = gr_malloc(sizeof(uint64_t) * (size_t)cap);
        if (!d) {
            b->failed = true;
            return;
        }
        memcpy(d, b->data, sizeof(uint64_t) * (size_t)b->len);
        word_buf_free(b);
        b->data = d;
        b->cap = cap;
    }
    b->data[b->len++] = v;
}

/* b's words checked against a's as they come */
typedef struct {
    const word_buf *a;
    int at;
    bool differ;
} word_cmp;

static void cmp_word(void *user, uint64_t v) {
    word_cmp *c = user;
    if (c->differ) return;
    if (c->at >= c->a->len || c->a->data[c->at] != v) c->differ = true;
    c->at++;
}

gr_status gr_kernel_structure_equal(const gr_kernel *a, const gr_kernel *b, bool *out) {
    *out = false;
    word_buf wa;
    word_buf_init(&wa);
    structure_words(a, buf_word, &wa);
    gr_status st = wa.failed ? GR_ERR_NOMEM : GR_OK;
    if (st == GR_OK) {
        word_cmp c = {.a = &wa, .at = 0, .differ = false};
        structure_words(b, cmp_word, &c);
        *out = !c.differ && c.at == wa.len;
    }
    word_buf_free(&wa);
    return st;
}

gr_status gr_kstructure_of(const gr_kernel *k, gr_kstructure *out) {
    memset(out, 0, sizeof *out);
    word_buf w;
    word_buf_init(&w);
    structure_words(k, buf_word, &w);
    if (w.failed) {
        word_buf_free(&w);
        return gr_nomem();
    }
    uint64_t h = 0x6772616674ull; /* as gr_kernel_structure_hash */
    for (int i = 0; i < w.len; i++) hash_word(&h, w.data[i]);
    uint64_t *words = gr_malloc(sizeof(uint64_t) * (size_t)(w.len > 0 ? w.len : 1));
    if (!words) {
        word_buf_free(&w);
        return gr_nomem();
    }
    memcpy(words, w.data, sizeof(uint64_t) * (size_t)w.len);
    word_buf_free(&w);
    *out = (gr_kstructure){.hash = h, .len = w.len, .words = words};
    return GR_OK;
}

bool gr_kstructure_equal(const gr_kstructure *a, const gr_kstructure *b) {
    return a->hash == b->hash && a->len == b->len && !memcmp(a->words, b->words, sizeof(uint64_t) * (size_t)a->len);
}

void gr_kstructure_free(gr_kstructure *s) {
    if (!s || !s->words) return;
    gr_free(s->words, sizeof(uint64_t) * (size_t)(s->len > 0 ? s->len : 1));
    memset(s, 0, sizeof *s);
}

gr_status gr_kernel_instantiate(const gr_kernel *t, const gr_kernel *k, gr_kernel **out) {
    *out = NULL;
    bool same;
    GR_TRY(gr_kernel_structure_equal(t, k, &same));
    if (!same) return gr_error(GR_ERR_INVALID, "kernel %s: structure differs from template %s", k->name, t->name);
    return gr_kernel_instantiate_same(t, k, out);
}

gr_status gr_kernel_instantiate_same(const gr_kernel *t, const gr_kernel *k, gr_kernel **out) {
    *out = NULL;
    gr_kslot_map m;
    GR_TRY(gr_kslot_map_build(k, &m));
    int64_t *vals = gr_malloc(sizeof(int64_t) * (size_t)(m.n > 0 ? m.n : 1));
    gr_kernel *c = NULL;
    gr_status st = vals ? gr_kernel_clone(t, &c) : GR_ERR_NOMEM;
    if (st == GR_OK) {
        gr_kernel_slot_values(k, &m, vals);
        gr_kernel_apply_slots(c, &m, vals);
        /* what names things in messages comes from k (no effect on code) */
        memcpy(c->name, k->name, sizeof c->name);
        for (int p = 0; p < k->n_params; p++) memcpy(c->params[p].name, k->params[p].name, sizeof c->params[p].name);
        c->source_node = k->source_node;
        for (int i = 0; i < k->nodes.len; i++) c->nodes.data[i].access.origin = k->nodes.data[i].access.origin;
        for (int s = 0; s < k->n_stages; s++) c->stages[s].access.origin = k->stages[s].access.origin;
        *out = c;
    }
    gr_free(vals, sizeof(int64_t) * (size_t)(m.n > 0 ? m.n : 1));
    gr_kslot_map_free(&m);
    return st;
}
