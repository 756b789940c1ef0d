/* frontend/onnx/onnx-einsum — Einsum onto graft IR: the batched-matmul forms as one
 * matmul node, every other valid equation lowered at import (see below). */
#include "frontend/onnx/onnx-impl.h"
#include <stdio.h>
#include <string.h>

static gr_ir_attr A_int(const char *name, int64_t v) { return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INT, .i = v}; }
static gr_ir_attr A_ints(const char *name, const int64_t *v, int n) {
    return (gr_ir_attr){.name = (char *)name, .kind = GR_IR_ATTR_INTS, .ints = (int64_t *)v, .n = n};
}
static const gr_ir_value *irv(const ox_ctx *c, int ir) { return &c->g->values.data[ir]; }

/* ---- Einsum ------------------------------------------------------------------------------
 * The batched-matmul forms transformer exports use map to one matmul node
 * (cv_einsum); every other valid equation goes through einsum_general, which
 * lowers it at import to diagonals (a gather of the flattened pair of dims),
 * sums of labels nothing else needs, and a left-to-right chain of pairwise
 * contractions (transposes and reshapes around one batched matmul for float
 * dtypes, a broadcast multiply and a sum for integers), then a final transpose. */

/* Labels: 'a'..'z' are 0..25, 'A'..'Z' 26..51; ellipsis dims 52 + (position from the right). */
#define EIN_LABELS (52 + GR_MAX_DIMS)
typedef struct {
    int ir;
    int n;
    int lab[GR_MAX_DIMS];
} ein_op;

static int ein_axis(const ein_op *o, int l) {
    for (int i = 0; i < o->n; i++)
        if (o->lab[i] == l) return i;
    return -1;
}

static gr_status ein_transpose(ox_ctx *c, ein_op *o, const int *order) {
    bool same = true;
    int64_t perm[GR_MAX_DIMS];
    int lab[GR_MAX_DIMS];
    for (int i = 0; i < o->n; i++) {
        perm[i] = order[i];
        lab[i] = o->lab[order[i]];
        same &= order[i] == i;
    }
    if (same) return GR_OK;
    gr_ir_attr p = A_ints("perm", perm, o->n);
    GR_TRY(ox_emit(c, GR_OP_TRANSPOSE, 1, &o->ir, 1, &p, 1, NULL, false, &o->ir));
    memcpy(o->lab, lab, sizeof lab);
    return GR_OK;
}

/* Takes the diagonal of the two axes p < q of o (equal sizes, concrete): the pair
 * moved last, flattened to n*n, gathered at i*(n+1); the label ends up last. */
static gr_status ein_diagonal(ox_ctx *c, ein_op *o, int p, int q, const char *eq) {
    gr_dim dp = irv(c, o->ir)->dims[p], dq = irv(c, o->ir)->dims[q];
    if (gr_dx_is_sym(dp) || gr_dx_is_sym(dq))
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': a repeated index over a symbolic dim is not supported", eq);
    if (dp.size != dq.size)
        return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': a repeated index spans dims of sizes %lld and %lld", eq, (long long)dp.size, (long long)dq.size);
    int order[GR_MAX_DIMS], k = 0;
    for (int i = 0; i < o->n; i++)
        if (i != p && i != q) order[k++] = i;
    order[k++] = p;
    order[k++] = q;
    GR_TRY(ein_transpose(c, o, order));
    int64_t n = dp.size;
    gr_dim shape[GR_MAX_DIMS];
    for (int i = 0; i < o->n - 2; i++) shape[i] = irv(c, o->ir)->dims[i];
    shape[o->n - 2] = gr_dx_const(n * n);
    GR_TRY(ox_reshape_ir(c, o->ir, shape, o->n - 1, &o->ir));
    ox_tensor *t;
    GR_TRY(ox_tensor_new(GR_I64, 1, &n, &t));
    for (int64_t i = 0; i < n; i++) ((int64_t *)t->data)[i] = i * (n + 1);
    int idx;
    GR_TRY(ox_const_ir(c, t, &idx));
    int in[2] = {o->ir, idx};
    gr_ir_attr ga = A_int("axis", o->n - 2);
    GR_TRY(ox_emit(c, GR_OP_GATHER, 2, in, 1, &ga, 1, NULL, false, &o->ir));
    o->n--; /* the labels were [.., l, l]: one l is left, last */
    return GR_OK;
}

/* Sums the labels of o that `needed` does not mark (keepdims 0). */
static gr_status ein_sum_unneeded(ox_ctx *c, ein_op *o, const bool *needed) {
    int64_t axes[GR_MAX_DIMS];
    int na = 0, k = 0, lab[GR_MAX_DIMS];
    for (int i = 0; i < o->n; i++) {
        if (!needed[o->lab[i]]) axes[na++] = i;
        else lab[k++] = o->lab[i];
    }
    if (!na) return GR_OK;
    gr_ir_attr rs[2] = {A_ints("axes", axes, na), A_int("keepdims", 0)};
    GR_TRY(ox_emit(c, GR_OP_REDUCE_SUM, 1, &o->ir, 2, rs, 1, NULL, false, &o->ir));
    memcpy(o->lab, lab, sizeof lab);
    o->n = k;
    return GR_OK;
}

static gr_status ein_dims_product(ox_ctx *c, const ein_op *o, const int *labs, int n, gr_dim *out) {
    gr_dim d[GR_MAX_DIMS];
    for (int i = 0; i < n; i++) d[i] = irv(c, o->ir)->dims[ein_axis(o, labs[i])];
    return ox_dims_product(c, d, 0, n, out);
}

/* a := contraction of a and b over their shared labels that `kept` does not mark. */
static gr_status ein_pair(ox_ctx *c, ein_op *a, ein_op *b, const bool *kept, const char *eq) {
    int batch[GR_MAX_DIMS], contr[GR_MAX_DIMS], ao[GR_MAX_DIMS], bo[GR_MAX_DIMS];
    int nb = 0, nc = 0, na = 0, nbo = 0;
    for (int i = 0; i < a->n; i++) {
        int l = a->lab[i];
        if (ein_axis(b, l) < 0) ao[na++] = l;
        else if (kept[l]) batch[nb++] = l;
        else contr[nc++] = l;
    }
    for (int i = 0; i < b->n; i++)
        if (ein_axis(a, b->lab[i]) < 0) bo[nbo++] = b->lab[i];
    if (nb + na + nbo > GR_MAX_DIMS || nb + na + nbo + nc > GR_MAX_DIMS + 2)
        return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': an intermediate has more than %d dims", eq, GR_MAX_DIMS);
    gr_dtype dt = irv(c, a->ir)->dtype;
    gr_dim rdims[GR_MAX_DIMS];
    int rl[GR_MAX_DIMS], nr = 0;
    for (int i = 0; i < nb; i++) rl[nr] = batch[i], rdims[nr++] = irv(c, a->ir)->dims[ein_axis(a, batch[i])];
    for (int i = 0; i < na; i++) rl[nr] = ao[i], rdims[nr++] = irv(c, a->ir)->dims[ein_axis(a, ao[i])];
    for (int i = 0; i < nbo; i++) rl[nr] = bo[i], rdims[nr++] = irv(c, b->ir)->dims[ein_axis(b, bo[i])];
    int order[GR_MAX_DIMS], k = 0;
    if (gr_dtype_is_float(dt)) { /* [B, M, K] @ [B, K, N] */
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(a, batch[i]);
        for (int i = 0; i < na; i++) order[k++] = ein_axis(a, ao[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(a, contr[i]);
        GR_TRY(ein_transpose(c, a, order));
        k = 0;
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(b, batch[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(b, contr[i]);
        for (int i = 0; i < nbo; i++) order[k++] = ein_axis(b, bo[i]);
        GR_TRY(ein_transpose(c, b, order));
        gr_dim B, M, K, N, sa[3], sb[3];
        GR_TRY(ein_dims_product(c, a, batch, nb, &B));
        GR_TRY(ein_dims_product(c, a, ao, na, &M));
        GR_TRY(ein_dims_product(c, a, contr, nc, &K));
        GR_TRY(ein_dims_product(c, b, bo, nbo, &N));
        sa[0] = B, sa[1] = M, sa[2] = K, sb[0] = B, sb[1] = K, sb[2] = N;
        int ra, rb, mm;
        GR_TRY(ox_reshape_ir(c, a->ir, sa, 3, &ra));
        GR_TRY(ox_reshape_ir(c, b->ir, sb, 3, &rb));
        GR_TRY(ox_emit2(c, GR_OP_MATMUL, ra, rb, &mm));
        GR_TRY(ox_reshape_ir(c, mm, rdims, nr, &a->ir));
    } else { /* a [batch, ao, 1.., contr] * b [batch, 1.., bo, contr], summed over contr */
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(a, batch[i]);
        for (int i = 0; i < na; i++) order[k++] = ein_axis(a, ao[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(a, contr[i]);
        GR_TRY(ein_transpose(c, a, order));
        k = 0;
        for (int i = 0; i < nb; i++) order[k++] = ein_axis(b, batch[i]);
        for (int i = 0; i < nbo; i++) order[k++] = ein_axis(b, bo[i]);
        for (int i = 0; i < nc; i++) order[k++] = ein_axis(b, contr[i]);
        GR_TRY(ein_transpose(c, b, order));
        gr_dim sa[GR_MAX_DIMS], sb[GR_MAX_DIMS];
        int n = 0;
        if (nr + 1 > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': an intermediate has more than %d dims", eq, GR_MAX_DIMS);
        gr_dim C;
        GR_TRY(ein_dims_product(c, a, contr, nc, &C));
        for (int i = 0; i < nb; i++) sa[n] = rdims[n], sb[n] = rdims[n], n++;
        for (int i = 0; i < na; i++) sa[n] = rdims[n], sb[n] = gr_dx_const(1), n++;
        for (int i = 0; i < nbo; i++) sa[n] = gr_dx_const(1), sb[n] = rdims[n], n++;
        sa[n] = C, sb[n] = C, n++;
        int ra, rb, prod;
        GR_TRY(ox_reshape_ir(c, a->ir, sa, n, &ra));
        GR_TRY(ox_reshape_ir(c, b->ir, sb, n, &rb));
        GR_TRY(ox_emit2(c, GR_OP_MUL, ra, rb, &prod));
        int64_t lastax = n - 1;
        gr_ir_attr rs[2] = {A_ints("axes", &lastax, 1), A_int("keepdims", 0)};
        GR_TRY(ox_emit(c, GR_OP_REDUCE_SUM, 1, &prod, 2, rs, 1, NULL, false, &a->ir));
    }
    memcpy(a->lab, rl, sizeof rl);
    a->n = nr;
    return GR_OK;
}

/* Parses one term ("ab...c") of an operand of rank `rank` into labels; n_ell: the
 * ellipsis rank (out), -1 without an ellipsis. */
static gr_status ein_term(ox_ctx *c, const char *eq, const char *t, size_t len, int rank, int *lab, int *n, int *n_ell) {
    int letters = 0;
    bool ell = false;
    for (size_t i = 0; i < len; i++) {
        char ch = t[i];
        if (ch == '.') {
            if (ell || i + 2 >= len || t[i + 1] != '.' || t[i + 2] != '.')
                return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': a malformed ellipsis", eq);
            ell = true;
            i += 2;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            letters++;
        } else {
            return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': '%c' is not an index letter", eq, ch);
        }
    }
    int e = ell ? rank - letters : 0;
    if (rank >= 0 && (e < 0 || (!ell && letters != rank)))
        return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': a term with %d indices for an operand of rank %d", eq, letters, rank);
    if (letters + e > GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d dims", eq, GR_MAX_DIMS);
    *n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = t[i];
        if (ch == '.') {
            for (int j = 0; j < e; j++) lab[(*n)++] = 52 + (e - 1 - j);
            i += 2;
        } else {
            lab[(*n)++] = ch >= 'a' ? ch - 'a' : 26 + ch - 'A';
        }
    }
    *n_ell = ell ? e : -1;
    return GR_OK;
}

static gr_status einsum_general(ox_ctx *c) {
    char eq[512];
    const Onnx__AttributeProto *at = ox_attr(c, "equation");
    if (!at || !at->has_s) return ox_node_error(c, GR_ERR_INVALID, "attribute 'equation' is required");
    if (at->s.len >= sizeof eq) return ox_node_error(c, GR_ERR_UNSUPPORTED, "equation longer than %zu characters", sizeof eq - 1);
    GR_TRY(ox_attr_string(c, "equation", "", eq, sizeof eq));
    size_t w = 0;
    for (size_t r = 0; eq[r]; r++)
        if (eq[r] != ' ') eq[w++] = eq[r];
    eq[w] = 0;
    int nin = ox_n_in(c);
    if (nin < 1 || nin > 16) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum of %d operands (1 to 16 are supported)", nin);
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    if (arrow && strstr(arrow + 2, "->")) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': more than one '->'", eq);
    ein_op ops[16];
    int count[EIN_LABELS] = {0}, max_ell = 0;
    gr_dim size[EIN_LABELS];
    bool has_size[EIN_LABELS] = {false};
    const char *t = eq;
    for (int i = 0; i < nin; i++) {
        const char *end = memchr(t, ',', lhs_len - (size_t)(t - eq));
        size_t len = end ? (size_t)(end - t) : lhs_len - (size_t)(t - eq);
        if (i == nin - 1 && end) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s' has more terms than the node's %d inputs", eq, nin);
        if (i < nin - 1 && !end) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s' has fewer terms than the node's %d inputs", eq, nin);
        GR_TRY(ox_in_ir(c, i, &ops[i].ir));
        const gr_ir_value *v = irv(c, ops[i].ir);
        if (!v->typed) return ox_node_error(c, GR_ERR_UNSUPPORTED, "the shape of input %d is not known", i);
        if (i && v->dtype != irv(c, ops[0].ir)->dtype) return ox_node_error(c, GR_ERR_SHAPE, "einsum operands differ in dtype");
        int e;
        GR_TRY(ein_term(c, eq, t, len, v->ndim, ops[i].lab, &ops[i].n, &e));
        if (e > max_ell) max_ell = e;
        t = end ? end + 1 : t + len;
    }
    for (int i = 0; i < nin; i++)
        for (int d = 0; d < ops[i].n; d++) count[ops[i].lab[d]]++;
    /* label sizes: equal, or 1 broadcast (a size-1 dim of a label sized otherwise elsewhere is squeezed) */
    for (int i = 0; i < nin; i++)
        for (int d = 0; d < ops[i].n; d++) {
            int l = ops[i].lab[d];
            gr_dim s = irv(c, ops[i].ir)->dims[d];
            if (!has_size[l] || (!gr_dx_is_sym(size[l]) && size[l].size == 1)) size[l] = s, has_size[l] = true;
            else if (!gr_dx_equal(size[l], s) && !(!gr_dx_is_sym(s) && s.size == 1)) {
                if (!gr_dx_is_sym(s) && !gr_dx_is_sym(size[l]))
                    return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': an index spans dims of sizes %lld and %lld", eq, (long long)size[l].size, (long long)s.size);
                return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': an index spans symbolic dims graft cannot prove equal", eq);
            }
        }
    for (int i = 0; i < nin; i++) {
        int64_t axes[GR_MAX_DIMS];
        int na = 0, k = 0, lab[GR_MAX_DIMS];
        for (int d = 0; d < ops[i].n; d++) {
            gr_dim s = irv(c, ops[i].ir)->dims[d];
            int l = ops[i].lab[d];
            if (!gr_dx_is_sym(s) && s.size == 1 && !(!gr_dx_is_sym(size[l]) && size[l].size == 1)) axes[na++] = d;
            else lab[k++] = l;
        }
        if (na) {
            gr_ir_attr a = A_ints("axes", axes, na);
            GR_TRY(ox_emit(c, GR_OP_SQUEEZE, 1, &ops[i].ir, 1, &a, 1, NULL, false, &ops[i].ir));
            memcpy(ops[i].lab, lab, sizeof lab);
            ops[i].n = k;
        }
    }
    /* output labels: explicit, or implicit (the labels seen once, sorted, after the ellipsis dims) */
    int out[GR_MAX_DIMS], no = 0;
    if (arrow) {
        int e;
        const char *ot = arrow + 2;
        GR_TRY(ein_term(c, eq, ot, strlen(ot), -1, out, &no, &e));
        /* an output ellipsis has the largest ellipsis rank: ein_term gave it rank 0 */
        if (strstr(ot, "...")) {
            int tmp[GR_MAX_DIMS], k = 0;
            const char *p = strstr(ot, "...");
            int before = 0;
            for (const char *q = ot; q < p; q++) before++;
            for (int i = 0; i < before; i++) tmp[k++] = out[i];
            for (int j = 0; j < max_ell; j++) {
                if (k == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d output dims", eq, GR_MAX_DIMS);
                tmp[k++] = 52 + (max_ell - 1 - j);
            }
            for (int i = before; i < no; i++) {
                if (k == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d output dims", eq, GR_MAX_DIMS);
                tmp[k++] = out[i];
            }
            memcpy(out, tmp, sizeof tmp);
            no = k;
        } /* without "..." in the output, ellipsis dims are summed (numpy) */
        for (int i = 0; i < no; i++) {
            if (out[i] < 52 && !count[out[i]])
                return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': output index '%c' is in no input", eq, out[i] < 26 ? 'a' + out[i] : 'A' + out[i] - 26);
            for (int j = 0; j < i; j++)
                if (out[j] == out[i]) return ox_node_error(c, GR_ERR_INVALID, "einsum '%s': an output index repeats", eq);
        }
    } else {
        for (int j = 0; j < max_ell; j++) out[no++] = 52 + (max_ell - 1 - j);
        for (int a = 0; a < 52; a++) { /* ASCII order: 'A'..'Z' before 'a'..'z' */
            int l = a < 26 ? 26 + a : a - 26;
            if (count[l] == 1) {
                if (no == GR_MAX_DIMS) return ox_node_error(c, GR_ERR_UNSUPPORTED, "einsum '%s': more than %d output dims", eq, GR_MAX_DIMS);
                out[no++] = l;
            }
        }
    }
    bool in_out[EIN_LABELS] = {false};
    for (int i = 0; i < no; i++) in_out[out[i]] = true;
    /* diagonals of repeated labels within one operand */
    for (int i = 0; i < nin; i++) {
        for (bool again = true; again;) {
            again = false;
            for (int p = 0; p < ops[i].n && !again; p++)
                for (int q = p + 1; q < ops[i].n && !again; q++)
                    if (ops[i].lab[p] == ops[i].lab[q]) {
                        int l = ops[i].lab[p];
                        GR_TRY(ein_diagonal(c, &ops[i], p, q, eq));
                        ops[i].lab[ops[i].n - 1] = l;
                        again = true;
                    }
        }
    }
    /* contract left to right: ops[0] := ops[0] (x) ops[i]. Before each step each side
     * sums the labels that neither the output nor any operand still to come needs
     * (kept), nor the other side (those are contracted by the step). */
    for (int i = 1; i < nin; i++) {
        bool kept[EIN_LABELS], need0[EIN_LABELS], needi[EIN_LABELS];
        memcpy(kept, in_out, sizeof kept);
        for (int j = i + 1; j < nin; j++)
            for (int d = 0; d < ops[j].n; d++) kept[ops[j].lab[d]] = true;
        memcpy(need0, kept, sizeof kept);
        memcpy(needi, kept, sizeof kept);
        for (int d = 0; d < ops[i].n; d++) need0[ops[i].lab[d]] = true;
        for (int d = 0; d < ops[0].n; d++) needi[ops[0].lab[d]] = true;
        GR_TRY(ein_sum_unneeded(c, &ops[0], need0));
        GR_TRY(ein_sum_unneeded(c, &ops[i], needi));
        GR_TRY(ein_pair(c, &ops[0], &ops[i], kept, eq));
    }
    GR_TRY(ein_sum_unneeded(c, &ops[0], in_out));
    /* output order; labels broadcast away everywhere come back as size-1 dims */
    ein_op *r = &ops[0];
    int order[GR_MAX_DIMS], k = 0;
    for (int i = 0; i < no; i++) {
        int ax = ein_axis(r, out[i]);
        if (ax >= 0) order[k++] = ax;
    }
    GR_TRY(ein_transpose(c, r, order));
    if (r->n != no) {
        gr_dim shape[GR_MAX_DIMS];
        for (int i = 0; i < no; i++) {
            int ax = ein_axis(r, out[i]);
            shape[i] = ax >= 0 ? irv(c, r->ir)->dims[ax] : gr_dx_const(1);
        }
        int64_t v[GR_MAX_DIMS];
        int32_t e[GR_MAX_DIMS];
        gr_ir_attr ra = ox_attr_sints("shape", shape, no, v, e);
        return ox_emit1(c, GR_OP_RESHAPE, 1, &r->ir, 1, &ra);
    }
    return ox_emit1(c, GR_OP_IDENTITY, 1, &r->ir, 0, NULL);
}

static gr_status einsum_unsupported(ox_ctx *c, const char *eq, const char *why) {
    (void)eq, (void)why; /* not one matmul: the general lowering */
    return einsum_general(c);
}

gr_status ox_cv_einsum(ox_ctx *c, gr_op op) {
    GR_TRY(ox_check_arity(c, 1, 64, 1));
    char eq[128], sa[32], sb[32], so[32];
    const Onnx__AttributeProto *eqa = ox_attr(c, "equation");
    if (eqa && eqa->has_s && eqa->s.len >= sizeof eq) return einsum_general(c); /* would not fit: not a plain matmul */
    GR_TRY(ox_attr_string(c, "equation", "", eq, sizeof eq));
    if (ox_n_in(c) != 2) return einsum_unsupported(c, eq, "graft maps einsums of two operands only");
    /* strip spaces */
    size_t w = 0;
    for (size_t r = 0; eq[r]; r++)
        if (eq[r] != ' ') eq[w++] = eq[r];
    eq[w] = 0;
    const char *comma = strchr(eq, ','), *arrow = strstr(eq, "->");
    if (!comma || !arrow || comma > arrow || strchr(comma + 1, ',')) return einsum_unsupported(c, eq, "needs two operands and an explicit output");
    size_t la = (size_t)(comma - eq), lb = (size_t)(arrow - comma - 1), lo = strlen(arrow + 2);
    if (la >= sizeof sa || lb >= sizeof sb || lo >= sizeof so) return einsum_unsupported(c, eq, "too many indices");
    memcpy(sa, eq, la), sa[la] = 0;
    memcpy(sb, comma + 1, lb), sb[lb] = 0;
    memcpy(so, arrow + 2, lo), so[lo] = 0;
    const char *ops[3] = {sa, sb, so};
    for (int k = 0; k < 3; k++) {
        for (const char *p = ops[k]; *p; p++) {
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return einsum_unsupported(c, eq, "ellipsis or bad index");
            if (strchr(p + 1, *p)) return einsum_unsupported(c, eq, "repeated index");
        }
    }
    if (la < 2 || lb < 2 || lo < 2) return einsum_unsupported(c, eq, "operands must have at least 2 dims");
    /* trailing two letters of each operand; the rest is batch */
    char a0 = sa[la - 2], a1 = sa[la - 1], b0 = sb[lb - 2], b1 = sb[lb - 1], o0 = so[lo - 2], o1 = so[lo - 1];
    char k;
    if (a0 == b0 || a0 == b1) k = a0;
    else if (a1 == b0 || a1 == b1) k = a1;
    else return einsum_unsupported(c, eq, "no contraction index in the last two dims");
    char m = a0 == k ? a1 : a0, n = b0 == k ? b1 : b0;
    if (m == n || strchr(so, k)) return einsum_unsupported(c, eq, "not a matmul");
    bool ta = a0 == k, tb = b1 == k, swap;
    if (o0 == m && o1 == n) swap = false;
    else if (o0 == n && o1 == m) swap = true;
    else return einsum_unsupported(c, eq, "output's last two dims are not the matmul's");
    size_t ba = la - 2, bb = lb - 2, bo = lo - 2;
    const char *batch = ba ? sa : sb;
    size_t nb = ba ? ba : bb;
    bool ok = bo == nb && (!ba || !bb || (ba == bb && !memcmp(sa, sb, ba))) && !memcmp(so, batch, bo);
    for (size_t i = 0; ok && i < nb; i++) ok = batch[i] != k && batch[i] != m && batch[i] != n;
    if (!ok) return einsum_unsupported(c, eq, "batch dims must lead, in the same order in both operands and the output");
    int in[2];
    GR_TRY(ox_in_ir(c, 0, &in[0]));
    GR_TRY(ox_in_ir(c, 1, &in[1]));
    if ((irv(c, in[0])->typed && irv(c, in[0])->ndim != (int)la) || (irv(c, in[1])->typed && irv(c, in[1])->ndim != (int)lb))
        return ox_node_error(c, GR_ERR_SHAPE, "einsum '%s': operand ranks do not match the equation", eq);
    if (!swap) {
        gr_ir_attr attrs[2] = {A_int("trans_a", ta), A_int("trans_b", tb)};
        return ox_emit1(c, op, 2, in, 2, attrs);
    }
    /* (A B)^T = B^T A^T */
    int sw[2] = {in[1], in[0]};
    gr_ir_attr attrs[2] = {A_int("trans_a", !tb), A_int("trans_b", !ta)};
    return ox_emit1(c, op, 2, sw, 2, attrs);
}
