/* test_onnx — the ONNX frontend: committed fixtures (tests/data/onnx, written
 * by make_fixtures.py), op mapping, initializer values in every dtype,
 * external data, symbolic dims, import-time folding of shape chains, each
 * class of bad input with its message, and allocation failure at every step. */
#include "check.h"
#include "frontend/frontend.h"
#include "util/util.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA "tests/data/onnx/"

static gr_graph *load(const char *name) {
    gr_graph *g = NULL;
    char path[256];
    snprintf(path, sizeof path, DATA "%s", name);
    gr_status st = gr_onnx_load(path, &g);
    CHECK_MSG(st == GR_OK, "%s: %s: %s", name, gr_status_name(st), gr_last_error());
    return g;
}

static const gr_ir_node *node_named(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->nodes.len; i++)
        if (!strcmp(g->nodes.data[i].name, name)) return &g->nodes.data[i];
    return NULL;
}

static int count_op(const gr_graph *g, gr_op op) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++) n += g->nodes.data[i].op == op;
    return n;
}

static const gr_ir_node *first_op(const gr_graph *g, gr_op op) {
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.data[i].op == op) return &g->nodes.data[i];
    return NULL;
}

static bool ints_eq(const gr_graph *g, const gr_ir_node *n, const char *attr, const int64_t *want, int nw) {
    const int64_t *v;
    int nv;
    if (!n || gr_ir_attr_ints(g, n, attr, &v, &nv) != GR_OK || nv != nw) return false;
    for (int i = 0; i < nw; i++)
        if (v[i] != want[i]) return false;
    return true;
}

static int64_t attr_i(const gr_graph *g, const gr_ir_node *n, const char *name, int64_t def) {
    int64_t v = def;
    if (n) gr_ir_attr_int(g, n, name, def, &v);
    return v;
}

static const gr_ir_value *value_named(const gr_graph *g, const char *name) {
    int v = gr_ir_find_value(g, name);
    return v >= 0 ? &g->values.data[v] : NULL;
}

static bool shape_is(const gr_graph *g, const char *name, int ndim, const int64_t *dims) {
    const gr_ir_value *v = value_named(g, name);
    if (!v || !v->typed || v->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (v->dims[i].expr != GR_SYM_NONE || v->dims[i].size != dims[i]) return false;
    return true;
}

/* ==== good models ======================================================================== */
static void test_mlp(void) {
    gr_graph *g = load("mlp.onnx");
    if (!g) return;
    CHECK(g->inputs.len == 1 && g->outputs.len == 1);
    const gr_ir_value *x = &g->values.data[g->inputs.data[0]];
    CHECK(!strcmp(x->name, "x") && x->dtype == GR_F32 && x->ndim == 2);
    CHECK(x->dims[0].expr != GR_SYM_NONE && !strcmp(gr_dx_text(g, x->dims[0]), "N"));
    CHECK(x->dims[1].expr == GR_SYM_NONE && x->dims[1].size == 4);
    const gr_ir_node *fc = node_named(g, "fc");
    CHECK(fc && fc->op == GR_OP_MATMUL && fc->n_in == 3);
    CHECK(attr_i(g, fc, "trans_b", 0) == 0);
    const gr_ir_value *w = value_named(g, "W"), *b = value_named(g, "B");
    CHECK(w && w->kind == GR_VAL_CONST && w->ndim == 2 && w->dims[0].size == 4 && w->dims[1].size == 3);
    CHECK(w && w->nbytes == 48 && ((float *)w->data)[5] == 5.0f / 8);
    CHECK(b && b->kind == GR_VAL_CONST && ((float *)b->data)[0] == 0.5f && ((float *)b->data)[2] == 2.0f);
    const gr_ir_node *relu = node_named(g, "Relu_1"); /* unnamed ONNX node: "<OpType>_<i>" */
    CHECK(relu && relu->op == GR_OP_RELU);
    const gr_ir_value *y = &g->values.data[g->outputs.data[0]];
    CHECK(!strcmp(y->name, "y") && y->typed && y->ndim == 2 && y->dims[0].expr == x->dims[0].expr && y->dims[1].size == 3);
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);
}

static void test_shape_chain(void) {
    gr_graph *g = load("shape_chain.onnx");
    if (!g) return;
    /* Shape -> Gather -> Unsqueeze -> Concat folded away: one reshape left */
    CHECK(g->nodes.len == 1);
    const gr_ir_node *r = node_named(g, "flatten");
    CHECK(r && r->op == GR_OP_RESHAPE);
    int64_t want[2] = {2, -1};
    CHECK(ints_eq(g, r, "shape", want, 2));
    int64_t yd[2] = {2, 12};
    CHECK(shape_is(g, "y", 2, yd));
    /* shape-only constants never reach the IR */
    CHECK(gr_ir_find_value(g, "s") < 0 && gr_ir_find_value(g, "zero") < 0 && gr_ir_find_value(g, "target") < 0);
    gr_ir_graph_destroy(g);

    g = load("shape_partial.onnx"); /* Shape of x[S,4], only dim -1 used: still a constant */
    if (!g) return;
    r = first_op(g, GR_OP_RESHAPE);
    int64_t want2[2] = {-1, 4};
    CHECK(g->nodes.len == 1 && ints_eq(g, r, "shape", want2, 2));
    gr_ir_graph_destroy(g);

    /* the same chain on x[batch, 3, 4]: folds into a reshape to [batch, -1] with batch symbolic */
    g = load("shape_chain_sym.onnx");
    if (!g) return;
    r = first_op(g, GR_OP_RESHAPE);
    CHECK(g->nodes.len == 1 && r != NULL);
    if (r) {
        gr_dim shape[GR_MAX_DIMS];
        int n = 0;
        CHECK_OK(gr_ir_attr_sints(g, r, "shape", shape, GR_MAX_DIMS, &n));
        CHECK(n == 2 && !strcmp(gr_dx_text(g, shape[0]), "batch") && !gr_dx_is_sym(shape[1]) && shape[1].size == -1);
        int yv = r->out[0];
        const gr_ir_value *y = &g->values.data[yv];
        CHECK(y->typed && y->ndim == 2 && !strcmp(gr_dx_text(g, y->dims[0]), "batch") && y->dims[1].size == 12);
        int64_t five = 5;
        CHECK_OK(gr_ir_specialize(g, &five));
        y = &g->values.data[yv];
        CHECK(y->dims[0].size == 5 && !gr_dx_is_sym(y->dims[0]));
    }
    gr_ir_graph_destroy(g);
}

static void test_dtypes(void) {
    gr_graph *g = load("dtypes.onnx");
    if (!g) return;
    CHECK(g->outputs.len == 13 && g->inputs.len == 0);
    const gr_ir_value *v;
    v = value_named(g, "f32");
    CHECK(v && v->dtype == GR_F32 && ((float *)v->data)[1] == -2.0f);
    v = value_named(g, "f64");
    CHECK(v && v->dtype == GR_F64 && ((double *)v->data)[0] == 0.25 && ((double *)v->data)[1] == 1e300);
    v = value_named(g, "i64");
    CHECK(v && v->dtype == GR_I64 && ((int64_t *)v->data)[0] == -(INT64_C(1) << 40));
    v = value_named(g, "i32");
    CHECK(v && v->dtype == GR_I32 && ((int32_t *)v->data)[0] == -5 && ((int32_t *)v->data)[1] == 100000);
    v = value_named(g, "i8");
    CHECK(v && v->dtype == GR_I8 && ((int8_t *)v->data)[0] == -128 && ((int8_t *)v->data)[1] == 127);
    v = value_named(g, "u8");
    CHECK(v && v->dtype == GR_U8 && ((uint8_t *)v->data)[1] == 255);
    v = value_named(g, "bool");
    CHECK(v && v->dtype == GR_BOOL && ((uint8_t *)v->data)[0] == 1 && ((uint8_t *)v->data)[1] == 0);
    v = value_named(g, "f16");
    CHECK(v && v->dtype == GR_F16 && gr_half_to_f32(((uint16_t *)v->data)[1]) == -0.5f);
    v = value_named(g, "bf16");
    CHECK(v && v->dtype == GR_BF16 && gr_bf16_to_f32(((uint16_t *)v->data)[0]) == 1.5f);
    v = value_named(g, "raw_i32");
    CHECK(v && v->dtype == GR_I32 && v->ndim == 2 && ((int32_t *)v->data)[3] == 4);
    v = value_named(g, "raw_f16");
    CHECK(v && v->dtype == GR_F16 && gr_half_to_f32(((uint16_t *)v->data)[1]) == 2.0f);
    v = value_named(g, "scalar");
    CHECK(v && v->ndim == 0 && ((float *)v->data)[0] == 3.25f);
    v = value_named(g, "empty");
    CHECK(v && v->ndim == 2 && v->dims[0].size == 0 && v->nbytes == 0);
    gr_ir_graph_destroy(g);
}

static void test_external(void) {
    gr_graph *g = load("external.onnx");
    if (!g) return;
    const gr_ir_value *w = value_named(g, "Wext");
    CHECK(w && w->kind == GR_VAL_CONST && w->nbytes == 24);
    CHECK(w && ((float *)w->data)[0] == -1.0f && ((float *)w->data)[5] == 4.0f);
    gr_ir_graph_destroy(g);
    g = NULL;
    CHECK_ERR(gr_onnx_load(DATA "external_short.onnx", &g), GR_ERR_IO, "too short");
    CHECK(strstr(gr_last_error(), "Wext") && strstr(gr_last_error(), "external.onnx.data"));
    CHECK_ERR(gr_onnx_load(DATA "external_missing.onnx", &g), GR_ERR_IO, "missing.onnx.data");
    CHECK(strstr(gr_last_error(), "Wext") != NULL);
    CHECK_ERR(gr_onnx_load(DATA "external_escape.onnx", &g), GR_ERR_INVALID, "relative path inside");
    CHECK(g == NULL);
}

/* ==== external data that is hostile: links out of the model's folder, NUL bytes, FIFOs ======== */
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_onnx: timed out: a read blocked (FIFO?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static bool put_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    return ok;
}

/* external.onnx with its 18-byte location "external.onnx.data" replaced by another of 18 bytes */
static char *with_location(const char *model, size_t n, const char *loc18) {
    const char *at = memmem(model, n, "external.onnx.data", 18);
    char *m = at ? gr_malloc(n) : NULL;
    if (m) {
        memcpy(m, model, n);
        memcpy(m + (at - model), loc18, 18);
    }
    return m;
}

static void test_external_hostile(void) {
    char *model = NULL, *data = NULL, *patched = NULL;
    size_t model_n = 0, data_n = 0;
    char real_data[PATH_MAX], dir[256], outside[256];
    snprintf(dir, sizeof dir, "%s/graft-test-onnx-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(outside, sizeof outside, "%s/graft-test-onnx-out-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (gr_read_file(DATA "external.onnx", &model, &model_n) != GR_OK ||
        gr_read_file(DATA "external.onnx.data", &data, &data_n) != GR_OK || !realpath(DATA "external.onnx.data", real_data) ||
        !mkdtemp(dir) || !mkdtemp(outside)) {
        CHECK(!"external.onnx fixtures, temporary folders");
        goto out;
    }
    char path[PATH_MAX], data_path[PATH_MAX], sub[PATH_MAX], sub_data[PATH_MAX], alias[PATH_MAX], alias_model[PATH_MAX],
        link_dir[PATH_MAX], out_data[PATH_MAX];
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    snprintf(data_path, sizeof data_path, "%s/external.onnx.data", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(sub_data, sizeof sub_data, "%s/sub/real.data", dir);
    snprintf(alias, sizeof alias, "%s/alias", dir);
    snprintf(alias_model, sizeof alias_model, "%s/alias/m.onnx", dir);
    snprintf(link_dir, sizeof link_dir, "%s/o", dir);
    snprintf(out_data, sizeof out_data, "%s/data-outside.bin", outside); /* 16 bytes of name */
    CHECK(put_file(path, model, model_n) && mkdir(sub, 0700) == 0 && put_file(sub_data, data, data_n) &&
          put_file(out_data, data, data_n));
    gr_graph *g = NULL;

    /* a copy of the data next to the model loads, also when the folder is reached through a link */
    CHECK(put_file(data_path, data, data_n));
    CHECK_OK(gr_onnx_load(path, &g));
    gr_ir_graph_destroy(g), g = NULL;
    CHECK(symlink(dir, alias) == 0);
    CHECK_OK(gr_onnx_load(alias_model, &g));
    gr_ir_graph_destroy(g), g = NULL;
    /* a link that stays inside the folder is followed */
    CHECK(unlink(data_path) == 0 && symlink("sub/real.data", data_path) == 0);
    CHECK_OK(gr_onnx_load(path, &g));
    gr_ir_graph_destroy(g), g = NULL;

    /* a link out of the folder is refused, though the location is a plain relative name */
    CHECK(unlink(data_path) == 0 && symlink(real_data, data_path) == 0);
    CHECK_ERR(gr_onnx_load(path, &g), GR_ERR_INVALID, "outside the model's directory");
    CHECK(g == NULL && strstr(gr_last_error(), "Wext") && strstr(gr_last_error(), real_data));
    CHECK(unlink(data_path) == 0);

    /* so is a linked folder on the way: location "o/data-outside.bin", o -> another folder */
    patched = with_location(model, model_n, "o/data-outside.bin");
    CHECK(patched != NULL);
    if (patched) {
        CHECK(mkdir(link_dir, 0700) == 0); /* o a real folder first: the location itself is fine */
        snprintf(sub_data, sizeof sub_data, "%s/o/data-outside.bin", dir);
        CHECK(put_file(sub_data, data, data_n));
        CHECK_OK(gr_onnx_load_buffer(patched, model_n, "inside.onnx", dir, &g));
        gr_ir_graph_destroy(g), g = NULL;
        CHECK(unlink(sub_data) == 0 && rmdir(link_dir) == 0 && symlink(outside, link_dir) == 0);
        CHECK_ERR(gr_onnx_load_buffer(patched, model_n, "linked.onnx", dir, &g), GR_ERR_INVALID,
                  "outside the model's directory");
        CHECK(g == NULL);
        gr_free(patched, model_n);
    }
    snprintf(sub_data, sizeof sub_data, "%s/sub/real.data", dir);

    /* a NUL byte in the location is refused, not cut at: "external.onnx\0data" would read the
     * model itself (external.onnx exists) as the weights */
    patched = with_location(model, model_n, "external.onnx\0data");
    CHECK(patched != NULL);
    if (patched) {
        CHECK_ERR(gr_onnx_load_buffer(patched, model_n, "nul.onnx", DATA, &g), GR_ERR_INVALID, "NUL byte at byte 13 of 18");
        CHECK(g == NULL && strstr(gr_last_error(), "Wext") && strstr(gr_last_error(), "location"));
        gr_free(patched, model_n);
    }

    /* a FIFO as the data file: refused at once, not waited on */
    CHECK(mkfifo(data_path, 0600) == 0);
    signal(SIGALRM, on_alarm);
    alarm(60);
    CHECK_ERR(gr_onnx_load(path, &g), GR_ERR_IO, "FIFO");
    CHECK(g == NULL && strstr(gr_last_error(), "Wext"));
    alarm(0);

    unlink(data_path);
    unlink(sub_data);
    rmdir(sub);
    unlink(alias);
    unlink(link_dir);
    unlink(path);
    rmdir(dir);
    unlink(out_data);
    rmdir(outside);
out:
    if (model) gr_free(model, model_n + 1);
    if (data) gr_free(data, data_n + 1);
}

static void test_attention(void) {
    gr_graph *g = load("attention.onnx");
    if (!g) return;
    CHECK(node_named(g, "ln1") && node_named(g, "ln1")->op == GR_OP_LAYER_NORM);
    const gr_ir_node *sp = node_named(g, "split_qkv");
    CHECK(sp && sp->op == GR_OP_SPLIT && sp->n_out == 3);
    const gr_ir_node *qk = node_named(g, "qk"), *pv = node_named(g, "pv");
    CHECK(qk && qk->op == GR_OP_MATMUL && attr_i(g, qk, "trans_b", 0) == 1 && attr_i(g, qk, "trans_a", 0) == 0);
    CHECK(pv && pv->op == GR_OP_MATMUL && attr_i(g, pv, "trans_b", 0) == 0);
    int64_t sd[4] = {1, 2, 3, 3};
    CHECK(shape_is(g, "scores", 4, sd));
    /* Reshape's 0 copies the input dim */
    const gr_ir_value *q4 = value_named(g, "q4");
    CHECK(q4 && q4->producer >= 0);
    int64_t heads[4] = {1, 3, 2, 4};
    if (q4 && q4->producer >= 0) CHECK(ints_eq(g, &g->nodes.data[q4->producer], "shape", heads, 4));
    CHECK(shape_is(g, "q4", 4, heads));
    /* Trilu + Cast of constants: folded? (Trilu is not folded: a graph node) */
    CHECK(count_op(g, GR_OP_TRILU) == 1);
    CHECK(count_op(g, GR_OP_SOFTMAX) == 1 && count_op(g, GR_OP_WHERE) == 1);
    const gr_ir_node *gelu = first_op(g, GR_OP_GELU);
    const char *approx = NULL;
    if (gelu) gr_ir_attr_string(g, gelu, "approximate", NULL, &approx);
    CHECK(approx && !strcmp(approx, "tanh"));
    int64_t yd[3] = {1, 3, 8};
    CHECK(shape_is(g, "y", 3, yd));
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);
}

static void test_unknown_dim(void) {
    gr_graph *g = load("unknown_dim.onnx");
    if (!g) return;
    const gr_ir_value *x = value_named(g, "x");
    CHECK(x && x->dims[0].expr != GR_SYM_NONE && !strncmp(gr_dx_text(g, x->dims[0]), "unk__", 5));
    const gr_ir_value *y = value_named(g, "y");
    CHECK(y && y->typed && x && y->dims[0].expr == x->dims[0].expr);
    gr_ir_graph_destroy(g);
    g = NULL;
    CHECK_ERR(gr_onnx_load(DATA "layernorm_mean.onnx", &g), GR_ERR_UNSUPPORTED, "graph output 'mean'");
    CHECK(strstr(gr_last_error(), "Mean or InvStdDev") != NULL);
}

/* ==== bad input ============================================================================ */
static void test_bad_input(void) {
    gr_graph *g = NULL;
    CHECK_ERR(gr_onnx_load(DATA "does_not_exist.onnx", &g), GR_ERR_IO, "does_not_exist.onnx");
    CHECK_ERR(gr_onnx_load(DATA "truncated.onnx", &g), GR_ERR_PARSE, "truncated.onnx");
    CHECK_ERR(gr_onnx_load(DATA "garbled.onnx", &g), GR_ERR_PARSE, "not a valid ONNX model");
    CHECK_ERR(gr_onnx_load(DATA "nograph.onnx", &g), GR_ERR_INVALID, "has no graph");
    CHECK_ERR(gr_onnx_load(DATA "bad_input_ref.onnx", &g), GR_ERR_INVALID, "'nope' names no value");
    CHECK(strstr(gr_last_error(), "node 'r'") != NULL);
    CHECK_ERR(gr_onnx_load(DATA "bad_init_size.onnx", &g), GR_ERR_INVALID, "initializer 'W': raw_data holds 12 bytes");
    CHECK_ERR(gr_onnx_load(DATA "opset12.onnx", &g), GR_ERR_UNSUPPORTED, "opset 12");
    CHECK_ERR(gr_onnx_load(DATA "opset22.onnx", &g), GR_ERR_UNSUPPORTED, "opset 22");
    CHECK_ERR(gr_onnx_load(DATA "unsupported_op.onnx", &g), GR_ERR_UNSUPPORTED,
              "node 'pool0' op 'LpPool' (domain '') is not supported");
    CHECK_ERR(gr_onnx_load(DATA "custom_domain.onnx", &g), GR_ERR_UNSUPPORTED,
              "node 'FancyOp_0' op 'FancyOp' (domain 'com.example') is not supported");
    /* 'ii,jj->ij' was refused before Einsum's general lowering: now two diagonals and an outer product */
    CHECK_OK(gr_onnx_load(DATA "einsum_unsupported.onnx", &g));
    gr_ir_graph_destroy(g);
    g = NULL;
    CHECK_ERR(gr_onnx_load_buffer("", 0, "empty.onnx", NULL, &g), GR_ERR_INVALID, "empty.onnx: the model has no graph");
    CHECK(g == NULL);

    /* every prefix of a good model: an error or a graph, never a crash */
    char *buf;
    size_t n;
    if (gr_read_file(DATA "attention.onnx", &buf, &n) == GR_OK) {
        int ok = 0, failed = 0;
        for (size_t len = 0; len < n; len += 7) {
            gr_status st = gr_onnx_load_buffer(buf, len, "prefix", DATA, &g);
            if (st == GR_OK) ok++, gr_ir_graph_destroy(g);
            else failed++;
            g = NULL;
        }
        /* and single flipped bytes */
        for (size_t i = 0; i < n; i += 3) {
            buf[i] ^= 0x5a;
            if (gr_onnx_load_buffer(buf, n, "flip", DATA, &g) == GR_OK) gr_ir_graph_destroy(g);
            g = NULL;
            buf[i] ^= 0x5a;
        }
        CHECK(failed > 0);
        gr_free(buf, n + 1);
    }
}

/* ==== subgraphs: If / Loop / Scan, and how deep graphs may nest =============================== */
static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* A model whose graphs nest `levels` deep: Graph.node -> Node.attribute -> Attribute.g -> Graph.
 * Every message is only its child, so the file is the wrappers' headers, outermost first:
 * they are made innermost first (each length is the size so far) and written reversed. */
static uint8_t *nested_model(int levels, size_t *n) {
    size_t cap = (size_t)levels * 3 + 1;
    uint8_t(*head)[16] = malloc(cap * sizeof *head);
    uint8_t *hlen = malloc(cap);
    uint8_t *buf = malloc(cap * 16 + 8);
    size_t size = 0, k = 0;
    static const int fields[3] = {6, 5, 1}; /* Attribute.g, Node.attribute, Graph.node */
    for (size_t i = 0; i < cap; i++, k++) {
        int field = i + 1 == cap ? 7 : fields[i % 3]; /* Model.graph last */
        size_t h = put_varint(head[k], (uint64_t)field << 3 | 2);
        h += put_varint(head[k] + h, size);
        hlen[k] = (uint8_t)h;
        size += h;
    }
    *n = 0;
    while (k--) {
        memcpy(buf + *n, head[k], hlen[k]);
        *n += hlen[k];
    }
    static const uint8_t opset[] = {0x42, 0x02, 0x10, 0x12}; /* opset_import { version: 18 } */
    memcpy(buf + *n, opset, sizeof opset);
    *n += sizeof opset;
    free(head);
    free(hlen);
    return buf;
}

static void test_subgraph_depth(void) {
    gr_graph *g = NULL;
    size_t n;
    /* deep enough to overflow a recursive parser's stack: refused before parsing */
    uint8_t *buf = nested_model(200000, &n);
    CHECK_ERR(gr_onnx_load_buffer(buf, n, "deep.onnx", DATA, &g), GR_ERR_UNSUPPORTED, "nest more than 16 levels deep");
    free(buf);
    buf = nested_model(17, &n);
    CHECK_ERR(gr_onnx_load_buffer(buf, n, "deep17.onnx", DATA, &g), GR_ERR_UNSUPPORTED, "nest more than 16 levels deep");
    free(buf);
    /* 16 levels pass the check (and fail later: these nodes have no op_type) */
    buf = nested_model(16, &n);
    gr_status st = gr_onnx_load_buffer(buf, n, "deep16.onnx", DATA, &g);
    CHECK(st != GR_OK && strstr(gr_last_error(), "nest") == NULL);
    free(buf);
    CHECK(g == NULL);
}

static void test_control_flow(void) {
    gr_graph *g = load("control_flow.onnx");
    if (!g) return;
    int ifs = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *nd = &g->nodes.data[i];
        if (nd->op != GR_OP_IF) continue;
        ifs++;
        /* the run-time If keeps both branches as subgraphs reading x and h from the main graph */
        CHECK(!strcmp(nd->name, "if_rt"));
        const gr_ir_attr *t = gr_ir_attr_find(nd, "then_branch");
        CHECK(t && t->graph && t->graph->parent == g && gr_ir_find_value(t->graph, "x") >= 0 && gr_ir_find_value(t->graph, "h") >= 0);
    }
    CHECK_MSG(ifs == 1, "%d if nodes (the constant If is inlined, the run-time one kept)", ifs);
    CHECK(gr_ir_find_node(g, "loop/iter2/l_add") >= 0 && gr_ir_find_node(g, "loop/iter3/l_add") < 0);
    CHECK(gr_ir_find_node(g, "scan/step1/s_add") >= 0);
    gr_ir_graph_destroy(g);
}

/* ==== forms of unoptimized PyTorch exports ================================================ */
static void test_exporter_forms(void) {
    gr_graph *g = load("exporter_forms.onnx");
    if (!g) return;
    /* SplitToSequence(x, 3) on axis 1 -> split [3, 3]; SequenceAt(seq, 1) reads the second part */
    const gr_ir_node *sp = first_op(g, GR_OP_SPLIT);
    int64_t sizes[2] = {3, 3};
    CHECK(sp && sp->n_out == 2 && ints_eq(g, sp, "split", sizes, 2) && attr_i(g, sp, "axis", -1) == 1);
    const gr_ir_node *at = node_named(g, "at");
    CHECK(at && at->op == GR_OP_IDENTITY && sp && at->in[0] == sp->out[1]);
    /* CumSum of a constant folded: [1, 2, 3] -> [1, 3, 6] */
    const gr_ir_value *c = value_named(g, "c");
    CHECK(c && c->kind == GR_VAL_CONST && c->dtype == GR_I64 && c->ndim == 1 && c->dims[0].size == 3);
    CHECK(c && ((int64_t *)c->data)[0] == 1 && ((int64_t *)c->data)[1] == 3 && ((int64_t *)c->data)[2] == 6);
    /* CastLike takes the dtype of its second input, constant or computed */
    const gr_ir_node *cl = node_named(g, "castlike"), *clr = node_named(g, "castlike_rt");
    CHECK(cl && cl->op == GR_OP_CAST && clr && clr->op == GR_OP_CAST);
    const gr_ir_value *xi = value_named(g, "xi");
    CHECK(xi && xi->typed && xi->dtype == GR_I64);
    /* GatherND(Transpose(d), [[2, 1], [0, 0]]) folded: [60, 10] */
    const gr_ir_value *z = value_named(g, "z");
    CHECK(z && z->kind == GR_VAL_CONST && z->ndim == 1 && z->dims[0].size == 2);
    CHECK(z && ((float *)z->data)[0] == 60.0f && ((float *)z->data)[1] == 10.0f);
    CHECK(gr_ir_find_value(g, "dt") < 0); /* the folded transpose never reaches the IR */
    /* no split given, keepdims=0: size-1 parts with the axis squeezed; position -1 is the last */
    int64_t wd[1] = {6};
    CHECK(shape_is(g, "w", 1, wd));
    CHECK(count_op(g, GR_OP_SQUEEZE) == 2);
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);

    gr_graph *bad = NULL;
    CHECK_ERR(gr_onnx_load(DATA "sequence_misuse.onnx", &bad), GR_ERR_UNSUPPORTED,
              "value 'seq' is a tensor sequence; graft reads sequences only through SequenceAt");
    CHECK(bad == NULL);
    /* CumSum on a run-time value: a masked sum over a range mask (numbers: tests/py/test_onnx_import.py) */
    CHECK_OK(gr_onnx_load(DATA "cumsum_runtime.onnx", &bad));
    if (bad) {
        CHECK(count_op(bad, GR_OP_REDUCE_SUM) == 1 && count_op(bad, GR_OP_RANGE) == 1);
        CHECK_OK(gr_ir_verify(bad));
        gr_ir_graph_destroy(bad);
    }
}

/* ==== allocation failure at every step leaks nothing ====================================== */
static void test_alloc_failures(const char *name) {
    char *buf;
    size_t n;
    char path[256];
    snprintf(path, sizeof path, DATA "%s", name);
    if (gr_read_file(path, &buf, &n) != GR_OK) {
        CHECK(0);
        return;
    }
    long base = gr_debug_live_allocs();
    int nomem = 0, other = 0;
    for (long k = 1;; k++) {
        gr_graph *g = NULL;
        gr_debug_fail_alloc_after(k);
        gr_status st = gr_onnx_load_buffer(buf, n, name, DATA, &g);
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) {
            gr_ir_graph_destroy(g);
            break;
        }
        if (st == GR_ERR_NOMEM) nomem++;
        else {
            other++;
            fprintf(stderr, "alloc failure %ld in %s gave %s: %s\n", k, name, gr_status_name(st), gr_last_error());
        }
        CHECK_MSG(gr_debug_live_allocs() == base, "%s: leak after failing allocation %ld", name, k);
        if (k > 100000) break;
    }
    CHECK_MSG(nomem > 0 && other == 0, "%s: %d nomem, %d other", name, nomem, other);
    CHECK(gr_debug_live_allocs() == base);
    gr_free(buf, n + 1);
}

int main(void) {
    long base = gr_debug_live_allocs();
    test_mlp();
    test_shape_chain();
    test_dtypes();
    test_external();
    test_external_hostile();
    test_attention();
    test_unknown_dim();
    test_bad_input();
    test_exporter_forms();
    test_subgraph_depth();
    test_control_flow();
    test_alloc_failures("control_flow.onnx");
    test_alloc_failures("mlp.onnx");
    test_alloc_failures("exporter_forms.onnx");
    test_alloc_failures("attention.onnx");
    test_alloc_failures("shape_chain.onnx");
    test_alloc_failures("../../../examples/cnn.onnx"); /* conv family, BatchNormalization folding */
    CHECK_MSG(gr_debug_live_allocs() == base, "%ld allocations leaked", gr_debug_live_allocs() - base);
    return check_summary("test_onnx");
}
