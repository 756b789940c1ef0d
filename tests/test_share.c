/* tests/test_share — masked attention calls of one segment share the mask's tile table
 * (passes/share.c, gr_libcall.mask_group).
 *
 * 1. Synthetic step lists: calls reading the same mask value and geometry form a group (its
 *    first call marked), a group of one call is none, a different value, offset, geometry or
 *    segment starts another group, unmasked calls and matmuls are left alone, and past
 *    GR_ATTN_MASK_GROUPS masks a call works alone.
 * 2. The exports under --precision bf16 (attention fused): every layer after the first reuses
 *    the first layer's classification (GPT-2, BERT, Llama: one mask per model call). */
#include "check.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include <stdio.h>
#include <string.h>

static gr_step attn(int segment, int mask_value, int64_t offset, int64_t seq, bool masked) {
    gr_step s;
    memset(&s, 0, sizeof s);
    s.kind = GR_STEP_LIBCALL;
    s.segment = segment;
    s.call.kind = GR_LIB_ATTENTION;
    s.call.dtype = GR_BF16;
    s.call.batch = 2, s.call.heads = 4, s.call.kv_heads = 4, s.call.seq_q = seq, s.call.seq_k = seq;
    s.call.head_dim = s.call.head_dim_v = 64;
    s.call.has_mask = masked;
    s.call.mask_dtype = GR_F32;
    s.call.mask_stride[0] = seq * seq, s.call.mask_stride[2] = seq, s.call.mask_stride[3] = 1;
    s.call.mask_group = 5, s.call.mask_group_first = true; /* stale values the pass must reset */
    s.n_args = GR_LIB_ATTENTION_NARGS;
    for (int a = 0; a < 4; a++) s.args[a] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = 100 + a};
    s.args[4] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = mask_value, .elem_offset = offset};
    return s;
}

static void expect(const gr_step_list *l, int i, int group, bool first) {
    const gr_libcall *c = &l->data[i].call;
    CHECK_MSG(c->mask_group == group && c->mask_group_first == first, "step %d: group %d first %d, expected %d %d", i,
              (int)c->mask_group, (int)c->mask_group_first, group, (int)first);
}

static void test_synthetic(void) {
    gr_step_list l;
    memset(&l, 0, sizeof l);
    gr_step mm;
    memset(&mm, 0, sizeof mm);
    mm.kind = GR_STEP_LIBCALL, mm.call.kind = GR_LIB_MATMUL;
    gr_step steps[] = {
        attn(0, 7, 0, 16, true),   /* 0: group 1 first */
        mm,                        /* 1 */
        attn(0, 7, 0, 16, true),   /* 2: reuses group 1 */
        attn(0, 8, 0, 16, true),   /* 3: another value: group 2 first */
        attn(0, 7, 0, 16, false),  /* 4: unmasked: none */
        attn(0, 8, 0, 16, true),   /* 5: reuses group 2 */
        attn(0, 7, 4, 16, true),   /* 6: another offset, alone in its group: none */
        attn(0, 7, 0, 32, true),   /* 7: another geometry, alone: none */
        attn(0, 7, 0, 16, true),   /* 8: group 1 again */
        attn(1, 7, 0, 16, true),   /* 9: a new segment: group 1 first */
        attn(1, 7, 0, 16, true),   /* 10: reuses it */
        attn(2, 7, 0, 16, true),   /* 11: alone in segment 2: none */
    };
    int n = (int)(sizeof steps / sizeof steps[0]);
    CHECK_OK(gr_vec_reserve(&l, n));
    memcpy(l.data, steps, sizeof steps);
    l.len = n;
    int reusing = -1;
    CHECK_OK(gr_pass_share_attention_masks(&l, &reusing));
    CHECK(reusing == 4);
    expect(&l, 0, 1, true);
    CHECK(l.data[1].call.mask_group == 0);
    expect(&l, 2, 1, false);
    expect(&l, 3, 2, true);
    expect(&l, 4, 0, false);
    expect(&l, 5, 2, false);
    expect(&l, 6, 0, false);
    expect(&l, 7, 0, false);
    expect(&l, 8, 1, false);
    expect(&l, 9, 1, true);
    expect(&l, 10, 1, false);
    expect(&l, 11, 0, false);
    /* more masks than groups: the ones past the last group work alone */
    l.len = 0;
    for (int v = 0; v < GR_ATTN_MASK_GROUPS + 2; v++) {
        CHECK_OK(gr_vec_push(&l, attn(0, 20 + v, 0, 16, true)));
        CHECK_OK(gr_vec_push(&l, attn(0, 20 + v, 0, 16, true)));
    }
    CHECK_OK(gr_pass_share_attention_masks(&l, &reusing));
    CHECK(reusing == GR_ATTN_MASK_GROUPS);
    for (int v = 0; v < GR_ATTN_MASK_GROUPS + 2; v++) {
        bool grouped = v < GR_ATTN_MASK_GROUPS;
        expect(&l, 2 * v, grouped ? v + 1 : 0, grouped);
        expect(&l, 2 * v + 1, grouped ? v + 1 : 0, false);
    }
    gr_vec_free(&l);
}

static void test_export(const char *name, int layers) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/onnx/dyn/%s/model.onnx", name);
    gr_graph *g = NULL;
    CHECK_OK(gr_onnx_load(path, &g));
    if (!g) return;
    int64_t syms[8];
    for (int k = 0; k < g->syms.len && k < 8; k++) syms[k] = !strcmp(g->syms.data[k].name, "batch") ? 2 : 16;
    gr_pipeline_opts po = {.fold_linear_only = true, .convert_precision = true, .precision = GR_BF16};
    gr_compiled c;
    gr_status st = gr_pass_pipeline(g, syms, &po, &c);
    CHECK_MSG(st == GR_OK, "%s: %s", name, gr_last_error());
    if (st == GR_OK) {
        int n_attn = 0, firsts = 0, reusing = 0;
        for (int i = 0; i < c.steps.len; i++) {
            const gr_step *s = &c.steps.data[i];
            if (s->kind != GR_STEP_LIBCALL || s->call.kind != GR_LIB_ATTENTION) continue;
            n_attn++;
            CHECK_MSG(s->call.has_mask && s->call.mask_group == 1, "%s: attention step %d: mask group %d", name, i,
                      (int)s->call.mask_group);
            if (s->call.mask_group_first) {
                firsts++;
                CHECK_MSG(reusing == 0, "%s: the group's first call after a reusing one", name);
            } else reusing++;
        }
        CHECK_MSG(n_attn == layers && firsts == 1 && reusing == layers - 1, "%s: %d attention steps, %d first, %d reusing",
                  name, n_attn, firsts, reusing);
        gr_compiled_free(&c);
    }
    gr_ir_graph_destroy(g);
}

int main(void) {
    test_synthetic();
    test_export("gpt2_dynamo", 2);
    test_export("bert_dynamo", 2);
    test_export("llama_dynamo", 2);
    return check_summary("test_share");
}
