/* tests/test_gir — the .gir parser and printer: structure and values of parsed
 * files, every error class with its location, round trips (inline and side
 * files), a no-crash loop over truncated and mutated inputs, and allocation
 * failure injection. Runs from the source root (tests/data/gir/...). */
#include "frontend/frontend.h"
#include "check.h"
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA "tests/data/gir"

static char *read_text(const char *path, size_t *n) {
    char *t = NULL;
    if (gr_read_file(path, &t, n) != GR_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, gr_last_error());
        return NULL;
    }
    return t;
}
static void free_text(char *t, size_t n) { gr_free(t, n + 1); }

static const gr_ir_value *val(const gr_graph *g, const char *name) {
    int v = gr_ir_find_value(g, name);
    return v >= 0 ? &g->values.data[v] : NULL;
}

static const gr_ir_node *node_named(const gr_graph *g, const char *name) {
    for (int i = 0; i < g->nodes.len; i++)
        if (!strcmp(g->nodes.data[i].name, name)) return &g->nodes.data[i];
    return NULL;
}

static bool is_listed_input(const gr_graph *g, int v) {
    for (int i = 0; i < g->inputs.len; i++)
        if (g->inputs.data[i] == v) return true;
    return false;
}

static float f32_at(const gr_ir_value *v, int i) {
    float f;
    memcpy(&f, (const char *)v->data + 4 * i, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static uint16_t u16_at(const gr_ir_value *v, int i) {
    uint16_t h;
    memcpy(&h, (const char *)v->data + 2 * i, 2);
    return h;
}
static double f64_at(const gr_ir_value *v, int i) {
    double d;
    memcpy(&d, (const char *)v->data + 8 * i, 8);
    return d;
}

/* ==== basic.gir: structure ============================================================= */
static void test_basic(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_load(DATA "/basic.gir", &g));
    if (!g) return;
    CHECK(g->origin && !strcmp(g->origin, DATA "/basic.gir"));
    CHECK(g->inputs.len == 3);
    const gr_ir_value *x = val(g, "x"), *temp = val(g, "temperature"), *b = val(g, "b"), *w = val(g, "w");
    CHECK(x && x->kind == GR_VAL_INPUT && x->ndim == 2 && x->dims[0].expr >= 0 && x->dims[0].size == -1 &&
          !strcmp(gr_dx_text(g, x->dims[0]), "N") && x->dims[1].size == 4 && x->dims[1].expr == GR_SYM_NONE);
    CHECK(x && x->line == 3 && x->col == 7 && x->placement == GR_PLACE_DEVICE);
    CHECK(temp && temp->ndim == 0 && temp->placement == GR_PLACE_HOST && temp->dtype == GR_F32);
    CHECK(b && b->kind == GR_VAL_CONST && b->nbytes == 16 && b->line == 7);
    if (b) {
        CHECK(f32_at(b, 0) == 0.5f && f32_at(b, 1) == -1.0f && f32_at(b, 2) == 2e-3f && isinf(f32_at(b, 3)) && f32_at(b, 3) > 0);
    }
    CHECK(w && w->nbytes == 64 && w->ndim == 2);
    if (w)
        for (int i = 0; i < 16; i++) CHECK(f32_at(w, i) == (i % 5 == 0 ? 1.0f : 0.0f));
    const gr_ir_value *mask = val(g, "mask");
    CHECK(mask && mask->dtype == GR_BOOL && ((unsigned char *)mask->data)[0] == 1 && ((unsigned char *)mask->data)[1] == 0);

    const gr_ir_node *h = node_named(g, "h");
    CHECK(h && h->op == GR_OP_MATMUL && h->n_in == 2 && h->line == 15 && h->col == 5);
    if (h) {
        const gr_ir_attr *tb = gr_ir_attr_find(h, "trans_b");
        CHECK(tb && tb->kind == GR_IR_ATTR_INT && tb->i == 1);
        CHECK(g->values.data[h->out[0]].line == 15 && g->values.data[h->out[0]].col == 1);
    }
    const gr_ir_node *fc = node_named(g, "fc1_bias");
    CHECK(fc && fc->op == GR_OP_ADD && !strcmp(g->values.data[fc->out[0]].name, "h2"));
    CHECK(!node_named(g, "h2"));
    const gr_ir_node *sp = node_named(g, "a");
    CHECK(sp && sp->op == GR_OP_SPLIT && sp->n_out == 2 && !strcmp(g->values.data[sp->out[1]].name, "c"));
    if (sp) {
        const gr_ir_attr *s = gr_ir_attr_find(sp, "split");
        CHECK(s && s->kind == GR_IR_ATTR_INTS && s->n == 2 && s->ints[0] == 2 && s->ints[1] == 2);
    }
    const gr_ir_node *ln = node_named(g, "n");
    CHECK(ln && ln->op == GR_OP_LAYER_NORM && ln->n_in == 3 && ln->in[2] == -1);
    if (ln) {
        const gr_ir_attr *e = gr_ir_attr_find(ln, "epsilon");
        CHECK(e && e->kind == GR_IR_ATTR_FLOAT && e->f == 1e-5);
    }
    const gr_ir_node *ge = node_named(g, "g");
    const char *approx = NULL;
    CHECK(ge && gr_ir_attr_string(g, ge, "approximate", NULL, &approx) == GR_OK && approx && !strcmp(approx, "tanh"));
    const gr_ir_node *rn = node_named(g, "w2");
    CHECK(rn && rn->n_in == 0 && rn->n_attr == 4);
    if (rn) {
        const gr_ir_attr *m = gr_ir_attr_find(rn, "mean");
        CHECK(m && m->kind == GR_IR_ATTR_FLOAT && m->f == 0.0);
        CHECK(rn->attrs[0].kind == GR_IR_ATTR_INTS && !strcmp(rn->attrs[0].name, "shape"));
    }
    const gr_ir_node *sm = node_named(g, "y");
    CHECK(sm && gr_ir_attr_find(sm, "axis") && gr_ir_attr_find(sm, "axis")->i == -1);
    const gr_ir_node *k = node_named(g, "k");
    CHECK(k && gr_ir_attr_find(k, "alpha")->f == 1.67326319217681884765625 && gr_ir_attr_find(k, "gamma")->kind == GR_IR_ATTR_FLOAT);
    const gr_ir_node *cc = node_named(g, "l");
    CHECK(cc && cc->n_in == 3);

    /* subgraphs: parent, own values, captured outer values */
    const gr_ir_node *z = node_named(g, "z");
    CHECK(z && z->op == GR_OP_IF && z->n_attr == 2 && z->line == 23);
    if (z && z->n_attr == 2) {
        const gr_graph *then_g = z->attrs[0].graph, *else_g = z->attrs[1].graph;
        CHECK(z->attrs[0].kind == GR_IR_ATTR_GRAPH && then_g && then_g->parent == g);
        CHECK(else_g && else_g->parent == g && else_g->origin && !strcmp(else_g->origin, g->origin));
        if (then_g && else_g) {
            int cx = gr_ir_find_value(then_g, "x");
            CHECK(cx >= 0 && then_g->values.data[cx].kind == GR_VAL_INPUT && !is_listed_input(then_g, cx));
            CHECK(cx >= 0 && then_g->values.data[cx].ndim == 2 && then_g->values.data[cx].dims[0].expr >= 0 &&
                  !strcmp(gr_dx_text((gr_graph *)then_g, then_g->values.data[cx].dims[0]), "N"));
            CHECK(then_g->inputs.len == 0 && then_g->nodes.len == 1 && then_g->outputs.len == 1);
            CHECK(then_g->nodes.len == 1 && then_g->nodes.data[0].line == 24 && then_g->nodes.data[0].col == 11);
            int ex = gr_ir_find_value(else_g, "x");
            CHECK(ex >= 0 && else_g->outputs.len == 1 && else_g->outputs.data[0] == ex && else_g->nodes.len == 0);
        }
    }
    CHECK(g->outputs.len == 4 && !strcmp(g->values.data[g->outputs.data[1]].name, "c"));
    gr_ir_graph_destroy(g);
}

/* control.gir: nesting, subgraph inputs, captures through two levels */
static void test_control(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_load(DATA "/control.gir", &g));
    if (!g) return;
    const gr_ir_node *p = node_named(g, "p");
    CHECK(p && p->op == GR_OP_IF && p->n_attr == 2);
    if (!p || p->n_attr != 2 || !p->attrs[0].graph) {
        gr_ir_graph_destroy(g);
        return;
    }
    const gr_graph *then_g = p->attrs[0].graph;
    const gr_ir_node *lp = node_named(then_g, "q");
    CHECK(lp && lp->op == GR_OP_LOOP && lp->n_in == 3 && lp->n_out == 2);
    const gr_graph *body = lp ? gr_ir_attr_find(lp, "body")->graph : NULL;
    CHECK(body && body->parent == then_g);
    if (body) {
        CHECK(body->inputs.len == 3 && !strcmp(body->values.data[body->inputs.data[2]].name, "carried"));
        /* one and x live in the root: captured by then_g and by body; two lives in then_g */
        int one_b = gr_ir_find_value(body, "one"), two_b = gr_ir_find_value(body, "two");
        CHECK(one_b >= 0 && body->values.data[one_b].kind == GR_VAL_INPUT && !is_listed_input(body, one_b));
        CHECK(one_b >= 0 && body->values.data[one_b].typed && body->values.data[one_b].dtype == GR_F32 &&
              body->values.data[one_b].ndim == 0);
        CHECK(two_b >= 0 && !is_listed_input(body, two_b));
        int one_t = gr_ir_find_value(then_g, "one"), x_t = gr_ir_find_value(then_g, "x");
        CHECK(one_t >= 0 && then_g->values.data[one_t].kind == GR_VAL_INPUT && !is_listed_input(then_g, one_t));
        CHECK(x_t >= 0 && then_g->values.data[x_t].kind == GR_VAL_INPUT);
        int x_b = gr_ir_find_value(body, "x");
        CHECK(x_b >= 0 && body->values.data[x_b].ndim == 3 && body->values.data[x_b].dims[1].expr >= 0 &&
              !strcmp(gr_dx_text((gr_graph *)body, body->values.data[x_b].dims[1]), "T"));
        CHECK(body->outputs.len == 3);
    }
    const gr_ir_node *m = node_named(g, "m");
    CHECK(m && gr_ir_attr_find(m, "keepdims")->i == 0);
    gr_ir_graph_destroy(g);
}

/* ==== dtypes.gir: values element by element against hand-computed bits ======================= */
static void test_dtypes(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_load(DATA "/dtypes.gir", &g));
    if (!g) return;
    const gr_ir_value *v = val(g, "a_f32");
    CHECK(v && v->nbytes == 32);
    if (v) {
        CHECK(f32_bits(f32_at(v, 0)) == 0x3dcccccdu);           /* 0.1f */
        CHECK(f32_bits(f32_at(v, 1)) == 0x80000000u);           /* -0 */
        CHECK(f32_bits(f32_at(v, 2)) == 0x00000001u);           /* smallest subnormal */
        CHECK(f32_bits(f32_at(v, 3)) == 0x7f7fffffu);           /* FLT_MAX */
        CHECK(f32_bits(f32_at(v, 4)) == 0xff800000u);           /* -inf */
        CHECK(isnan(f32_at(v, 5)));
        CHECK(f32_at(v, 6) == 16777216.0f);                     /* rounds to even */
        CHECK(f32_bits(f32_at(v, 7)) == 0x00800000u);           /* FLT_MIN */
    }
    v = val(g, "a_f16");
    CHECK(v && v->nbytes == 12);
    if (v) {
        CHECK(u16_at(v, 0) == 0x2e66); /* 0.1 */
        CHECK(u16_at(v, 1) == 0x7bff); /* 65504 = max */
        CHECK(u16_at(v, 2) == 0x8001); /* -6e-8: smallest subnormal */
        CHECK(u16_at(v, 3) == 0x0000); /* underflow */
        CHECK(u16_at(v, 4) == 0xfc00); /* -inf */
        CHECK(u16_at(v, 5) == 0x7c00); /* overflow to inf */
    }
    v = val(g, "a_bf16");
    CHECK(v && v->nbytes == 8 && v->ndim == 2);
    if (v) {
        CHECK(u16_at(v, 0) == 0x3dcd); /* 0.1 */
        CHECK(u16_at(v, 1) == 0xff62); /* -3e38 */
        CHECK(u16_at(v, 2) == 0x0001); /* 1e-40 */
        CHECK((u16_at(v, 3) & 0x7f80) == 0x7f80 && (u16_at(v, 3) & 0x7f)); /* nan */
    }
    v = val(g, "a_f64");
    CHECK(v && v->nbytes == 40);
    if (v) {
        CHECK(f64_at(v, 0) == 0.1 && f64_at(v, 1) == 1.7976931348623157e308 && f64_at(v, 2) == 5e-324);
        CHECK(f64_at(v, 3) == 0.0 && signbit(f64_at(v, 3)) && f64_at(v, 4) == 3.141592653589793);
    }
    v = val(g, "a_i64");
    CHECK(v && v->nbytes == 24);
    if (v) {
        int64_t e[3];
        memcpy(e, v->data, 24);
        CHECK(e[0] == INT64_MIN && e[1] == INT64_MAX && e[2] == 0);
    }
    v = val(g, "a_i32");
    CHECK(v && v->nbytes == 12);
    if (v) {
        int32_t e[3];
        memcpy(e, v->data, 12);
        CHECK(e[0] == INT32_MIN && e[1] == INT32_MAX && e[2] == -1);
    }
    v = val(g, "a_i8");
    CHECK(v && v->nbytes == 3);
    if (v) {
        const int8_t *e = v->data;
        CHECK(e[0] == -128 && e[1] == 127 && e[2] == 5);
    }
    v = val(g, "a_u8");
    CHECK(v && v->nbytes == 3);
    if (v) {
        const uint8_t *e = v->data;
        CHECK(e[0] == 0 && e[1] == 255 && e[2] == 17);
    }
    v = val(g, "a_bool");
    CHECK(v && v->nbytes == 4);
    if (v) {
        const uint8_t *e = v->data;
        CHECK(e[0] == 1 && e[1] == 0 && e[2] == 1 && e[3] == 0);
    }
    v = val(g, "scalar");
    CHECK(v && v->ndim == 0 && v->nbytes == 8 && f64_at(v, 0) == 2.5);
    v = val(g, "empty");
    CHECK(v && v->ndim == 2 && v->nbytes == 0 && v->dims[0].size == 0 && v->dims[1].size == 3);
    gr_ir_graph_destroy(g);
}

static void test_side_file(void) {
    gr_graph *g = NULL;
    CHECK_OK(gr_gir_load(DATA "/side.gir", &g));
    if (!g) return;
    const gr_ir_value *big = val(g, "big"), *head = val(g, "head"), *tail = val(g, "tail");
    CHECK(big && f32_at(big, 0) == 0.25f && f32_at(big, 1) == -3.5f && f32_at(big, 2) == 1e-3f && f32_at(big, 3) == 65504.0f);
    CHECK(tail && tail->ndim == 2 && f32_at(tail, 3) == 65504.0f);
    if (head) {
        int32_t e[4];
        memcpy(e, head->data, 16);
        CHECK(e[0] == 1 && e[1] == -2 && e[2] == 3 && e[3] == INT32_MAX);
    } else {
        CHECK(head);
    }
    gr_ir_graph_destroy(g);
    /* base_dir resolves relative side files for gr_gir_parse too */
    CHECK_OK(gr_gir_parse("graft 1\nconst w: i32[1] = file(\"side.bin\", offset=4)\n", "mem", DATA, &g));
    if (g) {
        int32_t e;
        memcpy(&e, g->values.data[0].data, 4);
        CHECK(e == -2);
        gr_ir_graph_destroy(g);
    }
}

/* ==== files that are not regular files: refused, never blocked on or read without end ======== */
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_gir: timed out: a read blocked (FIFO?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static void test_special_files(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/graft-test-gir-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char fifo[300], model[300];
    snprintf(fifo, sizeof fifo, "%s/pipe.bin", dir);
    snprintf(model, sizeof model, "%s/pipe.gir", dir);
    CHECK(mkfifo(fifo, 0600) == 0 && mkfifo(model, 0600) == 0);
    signal(SIGALRM, on_alarm);
    alarm(60); /* a blocking open of the FIFO would hang here */
    gr_graph *g = NULL;
    long live = gr_debug_live_allocs();
    /* the model itself */
    CHECK_ERR(gr_gir_load(model, &g), GR_ERR_IO, "FIFO");
    CHECK(g == NULL && strstr(gr_last_error(), "pipe.gir"));
    /* side files: a FIFO, an endless device, a directory */
    CHECK_ERR(gr_gir_parse("graft 1\nconst w: f32[4] = file(\"pipe.bin\")\noutput w\n", "m.gir", dir, &g), GR_ERR_IO,
              "m.gir:2:19: constant 'w': side file: cannot read");
    CHECK(strstr(gr_last_error(), "FIFO") && strstr(gr_last_error(), "pipe.bin"));
    CHECK_ERR(gr_gir_parse("graft 1\nconst w: f32[4] = file(\"/dev/zero\")\noutput w\n", "m.gir", dir, &g), GR_ERR_IO,
              "character device");
    CHECK_ERR(gr_gir_parse("graft 1\nconst w: f32[4] = file(\".\")\noutput w\n", "m.gir", dir, &g), GR_ERR_IO,
              "a directory");
    CHECK(g == NULL && gr_debug_live_allocs() == live);
    alarm(0);
    unlink(fifo);
    unlink(model);
    rmdir(dir);
}

/* ==== errors: each file in tests/data/gir/bad carries "# expect: STATUS line:col text" ================== */
static void check_bad_file(const char *path) {
    size_t n;
    char *text = read_text(path, &n);
    if (!text) {
        CHECK(text);
        return;
    }
    char status[16], loc[32], want[512];
    int got = sscanf(text, "# expect: %15s %31s %511[^\n]", status, loc, want);
    CHECK_MSG(got == 3, "%s: no '# expect:' line", path);
    if (got == 3) {
        gr_status st_want = !strcmp(status, "IO") ? GR_ERR_IO : GR_ERR_PARSE;
        gr_graph *g = (gr_graph *)&g; /* must be reset to NULL on failure */
        long live = gr_debug_live_allocs();
        gr_status st = gr_gir_load(path, &g);
        char prefix[600];
        snprintf(prefix, sizeof prefix, "%s:%s: ", path, loc);
        const char *msg = gr_last_error();
        CHECK_MSG(st == st_want && !strncmp(msg, prefix, strlen(prefix)) && strstr(msg, want),
                  "%s: expected %s at %s with \"%s\", got %s: %s", path, status, loc, want, gr_status_name(st), msg);
        CHECK(g == NULL);
        CHECK(gr_debug_live_allocs() == live);
        if (st == GR_OK) gr_ir_graph_destroy(g);
    }
    free_text(text, n);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_bad_files(void) {
    DIR *d = opendir(DATA "/bad");
    CHECK(d);
    if (!d) return;
    char *names[256];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < 256) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".gir")) names[count++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof *names, cmp_str);
    CHECK(count >= 40);
    for (int i = 0; i < count; i++) {
        char path[512];
        snprintf(path, sizeof path, DATA "/bad/%s", names[i]);
        check_bad_file(path);
        free(names[i]);
    }
}

static void test_errors_inline(void) {
    gr_graph *g = NULL;
    /* nesting limit: no deep recursion, a located error */
    char deep[256] = "graft 1\nconst k: f32[1] = ";
    size_t l = strlen(deep);
    for (int i = 0; i < 70; i++) deep[l++] = '[';
    deep[l] = 0;
    CHECK_ERR(gr_gir_parse(deep, "deep.gir", NULL, &g), GR_ERR_PARSE, "deep.gir:2:83: brackets nested deeper than 64");
    CHECK_ERR(gr_gir_load(DATA "/no-such-file.gir", &g), GR_ERR_IO, "no-such-file.gir");
    CHECK_ERR(gr_gir_load(DATA, &g), GR_ERR_IO, "is a directory");
    CHECK_ERR(gr_gir_parse("graft 1\ninput x: f32[2]\ny = relu(x)\nz = relu(y", "t.gir", NULL, &g), GR_ERR_PARSE,
              "t.gir:4:11: expected ',' or ')', got end of file");
    CHECK_ERR(gr_gir_parse("graft 1\r\ninput x: f32[2]\r\n\r\ny = relux(x)\r\n", NULL, NULL, &g), GR_ERR_PARSE,
              "<gir>:4:5: unknown op 'relux'");
    CHECK_ERR(gr_gir_parse("graft 1\ny = \x01", "c.gir", NULL, &g), GR_ERR_PARSE, "c.gir:2:5: unexpected byte 0x01");
    CHECK_ERR(gr_gir_parse(NULL, "x", NULL, &g), GR_ERR_INVALID, "text is NULL");
    /* a NUL inside a loaded file is an error, not a silent end */
    char dir[] = "/tmp/gir-nul-XXXXXX";
    if (mkdtemp(dir)) {
        char path[128];
        snprintf(path, sizeof path, "%s/nul.gir", dir);
        FILE *f = fopen(path, "wb");
        fwrite("graft 1\ninput x\0: f32[2]\n", 1, 25, f);
        fclose(f);
        char want[160];
        snprintf(want, sizeof want, "%s:2:8: NUL byte", path);
        CHECK_ERR(gr_gir_load(path, &g), GR_ERR_PARSE, want);
        remove(path);
        rmdir(dir);
    }
    /* the optional-input marker and keyword names need quotes to be names */
    CHECK_OK(gr_gir_parse("graft 1\ninput \"_\": f32[2]\ny = relu(\"_\")\noutput y\n", "k", NULL, &g));
    CHECK(g && g->nodes.len == 1 && g->nodes.data[0].in[0] == 0);
    gr_ir_graph_destroy(g);
    g = NULL;
    /* one-line subgraph; a subgraph may shadow an outer name */
    CHECK_OK(gr_gir_parse("graft 1\ninput c: bool[]\ninput x: f32[2]\ny = if(c, then_branch={ x = neg(c) }, else_branch={output x})\n",
                          "s", NULL, &g));
    if (g) {
        const gr_graph *t = g->nodes.data[0].attrs[0].graph;
        int xv = gr_ir_find_value(t, "x");
        CHECK(xv >= 0 && t->values.data[xv].kind == GR_VAL_NODE);
        gr_ir_graph_destroy(g);
    }
}

/* ==== printer ===================================================================================== */
static char *print_of(const gr_graph *g, size_t limit, const char *side) {
    char *t = NULL;
    gr_status st = gr_gir_print(g, limit, side, &t);
    CHECK_MSG(st == GR_OK, "print: %s", gr_last_error());
    return t;
}

/* parse(print(parse(x))) prints identically, inline and through a side file */
static void test_round_trip(const char *file, bool expect_side) {
    char path[256];
    snprintf(path, sizeof path, DATA "/%s", file);
    gr_graph *g1 = NULL, *g2 = NULL, *g3 = NULL;
    CHECK_OK(gr_gir_load(path, &g1));
    if (!g1) return;
    char *t1 = print_of(g1, 1 << 20, NULL);
    CHECK_OK(gr_gir_parse(t1 ? t1 : "", "printed", DATA, &g2));
    char *t2 = g2 ? print_of(g2, 1 << 20, NULL) : NULL;
    CHECK_MSG(t1 && t2 && !strcmp(t1, t2), "%s: print(parse(print)) differs:\n--- first\n%s\n--- second\n%s", file, t1 ? t1 : "",
              t2 ? t2 : "");

    char dir[] = "/tmp/gir-rt-XXXXXX";
    if (mkdtemp(dir)) {
        char side[128], gir[128];
        snprintf(side, sizeof side, "%s/weights.bin", dir);
        snprintf(gir, sizeof gir, "%s/model.gir", dir);
        char *ts = print_of(g1, 2, side);
        if (ts) {
            CHECK(!expect_side == !strstr(ts, "file(\"weights.bin\", offset="));
            FILE *f = fopen(gir, "w");
            fputs(ts, f);
            fclose(f);
            CHECK_OK(gr_gir_load(gir, &g3));
            char *t3 = g3 ? print_of(g3, 1 << 20, NULL) : NULL;
            CHECK_MSG(t1 && t3 && !strcmp(t1, t3), "%s: side-file round trip differs:\n%s\n---\n%s", file, t1 ? t1 : "", t3 ? t3 : "");
            gr_strfree(t3);
        }
        gr_strfree(ts);
        remove(side);
        remove(gir);
        rmdir(dir);
    }
    gr_strfree(t1);
    gr_strfree(t2);
    gr_ir_graph_destroy(g1);
    gr_ir_graph_destroy(g2);
    gr_ir_graph_destroy(g3);
}

/* Exact text for a graph built with the API: names, types comment, attrs, host placement. */
static void test_print_api_graph(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    gr_dim bdim = gr_dx_const(0);
    CHECK_OK(gr_dx_symbol(g, "batch", &bdim));
    gr_dim dims[2] = {bdim, {3, GR_SYM_NONE}};
    int x, t, c;
    CHECK_OK(gr_ir_add_input(g, "x", GR_F32, 2, dims, &x));
    CHECK_OK(gr_ir_add_input(g, "t", GR_F32, 0, NULL, &t));
    g->values.data[t].placement = GR_PLACE_HOST;
    int64_t cd[1] = {3};
    float cv[3] = {0.1f, 1.0f / 3.0f, -2.0f};
    CHECK_OK(gr_ir_add_const(g, "onnx::c", GR_F32, 1, cd, cv, &c));
    gr_ir_attr attrs[3];
    memset(attrs, 0, sizeof attrs);
    double fl[2] = {1.0, 0.5};
    attrs[0] = (gr_ir_attr){.name = "alpha", .kind = GR_IR_ATTR_FLOAT, .f = 1.0};
    attrs[1] = (gr_ir_attr){.name = "fl", .kind = GR_IR_ATTR_FLOATS, .floats = fl, .n = 2};
    attrs[2] = (gr_ir_attr){.name = "mode", .kind = GR_IR_ATTR_STRING, .s = "a\"b"};
    int in[3] = {x, c, -1}, n0, n1;
    const char *o0[] = {"y"};
    CHECK_OK(gr_ir_add_node(g, GR_OP_MATMUL, "mm", 3, in, 1, o0, 3, attrs, &n0));
    int in1[2] = {g->nodes.data[n0].out[0], t};
    CHECK_OK(gr_ir_add_node(g, GR_OP_DIV, NULL, 2, in1, 1, NULL, 0, NULL, &n1));
    gr_ir_value *y = &g->values.data[g->nodes.data[n0].out[0]];
    y->typed = true;
    y->dtype = GR_F32;
    y->ndim = 2;
    y->dims[0] = bdim;
    y->dims[1] = (gr_dim){3, GR_SYM_NONE};
    CHECK_OK(gr_ir_add_output(g, g->nodes.data[n1].out[0]));
    char *text = print_of(g, 16, NULL);
    const char *want = "graft 1\n"
                       "input x: f32[batch, 3]\n"
                       "input t: f32[] @host\n"
                       "const onnx::c: f32[3] = [0.1, 0.33333334, -2]\n"
                       "[mm] y = matmul(x, onnx::c, _, alpha=1.0, fl=[1.0, 0.5], mode=\"a\\\"b\")  # f32[batch, 3]\n"
                       "[div_1] \"%0\" = div(y, t)\n"
                       "output \"%0\"\n";
    CHECK_MSG(text && !strcmp(text, want), "got:\n%s\nwant:\n%s", text ? text : "", want);
    /* and it reads back with float attributes still floats */
    gr_graph *r = NULL;
    CHECK_OK(gr_gir_parse(text ? text : "", "api", NULL, &r));
    if (r) {
        const gr_ir_node *mm = node_named(r, "mm");
        CHECK(mm && gr_ir_attr_find(mm, "alpha")->kind == GR_IR_ATTR_FLOAT && gr_ir_attr_find(mm, "fl")->kind == GR_IR_ATTR_FLOATS);
        CHECK(r->values.data[gr_ir_find_value(r, "t")].placement == GR_PLACE_HOST);
        const gr_ir_value *cc = val(r, "onnx::c");
        CHECK(cc && !memcmp(cc->data, cv, sizeof cv));
        gr_ir_graph_destroy(r);
    }
    gr_strfree(text);
    /* a constant whose bytes do not match its type is refused, not printed */
    g->values.data[c].nbytes = 8;
    char *bad = NULL;
    CHECK_ERR(gr_gir_print(g, 16, NULL, &bad), GR_ERR_INVALID, "constant 'onnx::c'");
    CHECK(bad == NULL);
    g->values.data[c].nbytes = 12;
    CHECK_ERR(gr_gir_print(g, 0, "/no/such/dir/w.bin", &bad), GR_ERR_IO, "/no/such/dir/w.bin");
    gr_ir_graph_destroy(g);
}

/* every finite f32 / f16 / bf16 pattern class prints with enough digits */
static void test_float_exactness(void) {
    uint32_t seed = 12345;
    char text[64 * 1024];
    for (int dt = 0; dt < 3; dt++) {
        gr_dtype t = dt == 0 ? GR_F32 : dt == 1 ? GR_F16 : GR_BF16;
        size_t es = gr_dtype_size(t);
        unsigned char data[512 * 4];
        for (int i = 0; i < 512; i++) {
            seed = seed * 1664525u + 1013904223u;
            uint32_t bits = seed ^ (seed >> 13);
            memcpy(data + i * es, &bits, es);
        }
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int64_t dims[1] = {512};
        int c;
        CHECK_OK(gr_ir_add_const(g, "c", t, 1, dims, data, &c));
        char *p = print_of(g, 1000, NULL);
        gr_graph *r = NULL;
        CHECK_OK(gr_gir_parse(p ? p : "", "floats", NULL, &r));
        if (r) {
            int bad = 0;
            for (int i = 0; i < 512; i++) {
                const unsigned char *a = data + i * es, *b = (const unsigned char *)r->values.data[0].data + i * es;
                float fa = 0;
                uint16_t ha = 0;
                if (t == GR_F32) memcpy(&fa, a, 4);
                else memcpy(&ha, a, 2);
                bool a_nan = t == GR_F32 ? isnan(fa) : t == GR_F16 ? isnan(gr_half_to_f32(ha)) : isnan(gr_bf16_to_f32(ha));
                if (!a_nan && memcmp(a, b, es)) bad++;
            }
            CHECK_MSG(bad == 0, "%s: %d values changed in a round trip", gr_dtype_name(t), bad);
            gr_ir_graph_destroy(r);
        }
        if (p) snprintf(text, sizeof text, "%s", p);
        gr_strfree(p);
        gr_ir_graph_destroy(g);
    }
    /* f64 */
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    double d[6] = {0.1, 1.0 / 3.0, 1e300, -4.9406564584124654e-324, 123456789.123456789, -0.0};
    int64_t dims[1] = {6};
    int c;
    CHECK_OK(gr_ir_add_const(g, "d", GR_F64, 1, dims, d, &c));
    char *p = print_of(g, 10, NULL);
    CHECK(p && strstr(p, "[0.1, 0.3333333333333333, 1e+300, -4.94065645841247e-324, 123456789.12345679, -0]"));
    gr_graph *r = NULL;
    CHECK_OK(gr_gir_parse(p ? p : "", "f64", NULL, &r));
    CHECK(r && !memcmp(r->values.data[0].data, d, sizeof d));
    gr_ir_graph_destroy(r);
    gr_strfree(p);
    gr_ir_graph_destroy(g);
}

/* ==== robustness ======================================================================================= */
static void parse_no_crash(const char *text, int *ok, int *failed) {
    gr_graph *g = NULL;
    long live = gr_debug_live_allocs();
    gr_status st = gr_gir_parse(text, "fuzz.gir", DATA, &g);
    bool known = st == GR_OK || st == GR_ERR_PARSE || st == GR_ERR_IO;
    CHECK_MSG(known, "status %s: %s", gr_status_name(st), gr_last_error());
    if (st == GR_OK) {
        (*ok)++;
        char *t = NULL;
        if (gr_gir_print(g, 4, NULL, &t) == GR_OK) {
            gr_graph *r = NULL;
            gr_status st2 = gr_gir_parse(t, "fuzz-printed", DATA, &r);
            CHECK_MSG(st2 == GR_OK, "printed text does not parse: %s\n%s", gr_last_error(), t);
            gr_ir_graph_destroy(r);
            gr_strfree(t);
        }
        gr_ir_graph_destroy(g);
    } else {
        (*failed)++;
        CHECK(g == NULL);
        if (st == GR_ERR_PARSE) CHECK_MSG(!strncmp(gr_last_error(), "fuzz.gir:", 9), "message: %s", gr_last_error());
    }
    CHECK(gr_debug_live_allocs() == live);
}

static void test_fuzz(void) {
    const char *files[] = {"basic.gir", "control.gir", "quoted.gir", "dtypes.gir", "side.gir"};
    uint32_t seed = 2024;
    int ok = 0, failed = 0;
    int passed_before = check_passed_;
    /* GIR_FUZZ_ITERS=N runs a longer loop by hand */
    int iters = getenv("GIR_FUZZ_ITERS") ? atoi(getenv("GIR_FUZZ_ITERS")) : 1500;
    for (int f = 0; f < GR_ARRAY_LEN(files); f++) {
        char path[256];
        size_t n;
        snprintf(path, sizeof path, DATA "/%s", files[f]);
        char *orig = read_text(path, &n);
        if (!orig) continue;
        char *buf = malloc(n + 1);
        for (size_t len = 0; len <= n; len++) { /* every truncation */
            memcpy(buf, orig, len);
            buf[len] = 0;
            parse_no_crash(buf, &ok, &failed);
        }
        for (int iter = 0; iter < iters; iter++) { /* random byte mutations */
            memcpy(buf, orig, n + 1);
            seed = seed * 1664525u + 1013904223u;
            int edits = 1 + (int)(seed >> 28) % 4;
            for (int e = 0; e < edits; e++) {
                seed = seed * 1664525u + 1013904223u;
                size_t pos = (seed >> 8) % n;
                seed = seed * 1664525u + 1013904223u;
                static const char interesting[] = "[](){},=:@\"\\#\n_-9e.x";
                uint32_t r = seed >> 16;
                buf[pos] = (r & 1) ? interesting[(r >> 1) % (sizeof interesting - 1)] : (char)(r >> 8);
            }
            parse_no_crash(buf, &ok, &failed);
        }
        free(buf);
        free_text(orig, n);
    }
    printf("fuzz: %d parsed, %d rejected\n", ok, failed);
    CHECK(ok > 0 && failed > 0);
    /* count the loop as a few checks, not tens of thousands */
    int loop_checks = check_passed_ - passed_before;
    check_passed_ = passed_before + (loop_checks > 0);
}

/* Every allocation failure returns GR_ERR_NOMEM and leaks nothing. */
static void test_alloc_failures(void) {
    const char *files[] = {"basic.gir", "control.gir", "dtypes.gir", "quoted.gir", "side.gir"};
    for (int k = 0; k < GR_ARRAY_LEN(files); k++) {
        char path[256];
        size_t len;
        snprintf(path, sizeof path, DATA "/%s", files[k]);
        char *text = read_text(path, &len);
        if (!text) continue;
        long live = gr_debug_live_allocs();
        int nomem = 0, bad = 0, leaks = 0;
        bool finished = false;
        for (long n = 1; n < 100000 && !finished; n++) {
            gr_graph *g = NULL;
            gr_debug_fail_alloc_after(n);
            gr_status st = gr_gir_parse(text, "alloc.gir", DATA, &g);
            gr_debug_fail_alloc_after(0);
            if (st == GR_ERR_NOMEM) nomem++;
            else if (st == GR_OK) finished = true;
            else bad++, fprintf(stderr, "alloc failure %ld: %s: %s\n", n, gr_status_name(st), gr_last_error());
            if (st == GR_OK) {
                /* the printer's failure paths too */
                for (long m = 1; m < 100000; m++) {
                    char *t = NULL;
                    gr_debug_fail_alloc_after(m);
                    gr_status ps = gr_gir_print(g, 1 << 20, NULL, &t);
                    gr_debug_fail_alloc_after(0);
                    if (ps == GR_OK) {
                        gr_strfree(t);
                        break;
                    }
                    if (ps != GR_ERR_NOMEM || t) bad++;
                }
                gr_ir_graph_destroy(g);
            }
            if (gr_debug_live_allocs() != live) leaks++, live = gr_debug_live_allocs();
        }
        printf("alloc failures (%s): %d runs returned out-of-memory\n", files[k], nomem);
        CHECK(finished && nomem > 10);
        CHECK(bad == 0);
        CHECK(leaks == 0);
        free_text(text, len);
    }
}

int main(void) {
    test_basic();
    test_control();
    test_dtypes();
    test_side_file();
    test_special_files();
    test_bad_files();
    test_errors_inline();
    test_round_trip("basic.gir", true);
    test_round_trip("control.gir", false); /* only 1-element constants */
    test_round_trip("dtypes.gir", true);
    test_round_trip("quoted.gir", false);
    test_round_trip("side.gir", true);
    test_print_api_graph();
    test_float_exactness();
    test_fuzz();
    test_alloc_failures();
    return check_summary("test_gir");
}
