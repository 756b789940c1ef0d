/* libFuzzer target: any text through the .gir reader, printer, verifier and
 * shape inference.
 *
 * Properties checked (a violation calls abort(), which libFuzzer reports):
 *  - a parse error is a status with a message ("fuzz.gir:LINE:COL: ..." for
 *    syntax errors) that holds no raw control bytes, *out stays NULL and
 *    nothing leaks;
 *  - printing is a fixed point: print(parse(print(parse(x)))) is byte for
 *    byte print(parse(x)), and the printed text parses; a clone prints the same;
 *  - the verifier and shape inference on what parses return a status with a
 *    message (never GR_ERR_INTERNAL), and the graph they leave still prints
 *    and parses back to the same text (inference only adds types, which the
 *    printer writes as comments);
 *  - graft's allocator holds as many live blocks after the input as before.
 * Side files resolve against a directory that does not exist, so relative
 * `file(...)` references fail cleanly without reading anything. */
#include "frontend/frontend.h"
#include "fuzz-common.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ORIGIN "fuzz.gir"
#define FUZZ_BASE_DIR "/nonexistent-graft-fuzz-dir"

static void fail(const char *what, const char *a, const char *b) {
    fprintf(stderr, "gir_fuzz: %s\n", what);
    fprintf(stderr, "last error: %s\n", gr_last_error());
    if (a) fprintf(stderr, "---- first ----\n%s\n", a);
    if (b) fprintf(stderr, "---- second ----\n%s\n", b);
    abort();
}

/* An error status must come with a message. */
static void check_error(gr_status st, const char *stage) {
    const char *msg = gr_last_error();
    if (st == GR_ERR_INTERNAL) fail(stage, "returned GR_ERR_INTERNAL", NULL);
    if (!msg || !*msg) fail(stage, "returned an error without a message", NULL);
    if (!fuzz_message_escaped(msg)) fail(stage, "returned a message with raw control bytes", NULL);
}

static char *print_or_die(const gr_graph *g, const char *stage) {
    char *text = NULL;
    gr_status st = gr_gir_print(g, SIZE_MAX, NULL, &text);
    if (st != GR_OK || !text) fail(stage, "the printer failed", NULL);
    return text;
}

/* parse(text) must succeed and print exactly `want`. */
static void check_reprints(const char *text, const char *want, const char *stage) {
    gr_graph *g = NULL;
    gr_status st = gr_gir_parse(text, "fuzz-printed.gir", FUZZ_BASE_DIR, &g);
    if (st != GR_OK) fail(stage, text, "(printed text does not parse back)");
    char *again = print_or_die(g, stage);
    if (strcmp(again, want)) fail(stage, want, again);
    gr_strfree(again);
    gr_ir_graph_destroy(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0; /* an embedded NUL ends the text early, as it would for any C caller */

    long live = gr_debug_live_allocs();
    gr_graph *g = NULL;
    gr_status st = gr_gir_parse(text, FUZZ_ORIGIN, FUZZ_BASE_DIR, &g);
    if (st != GR_OK) {
        if (g) fail("parse failed but returned a graph", NULL, NULL);
        check_error(st, "parse");
        if (st == GR_ERR_PARSE && strncmp(gr_last_error(), FUZZ_ORIGIN ":", sizeof FUZZ_ORIGIN))
            fail("a syntax error does not start with origin:line:col", NULL, NULL);
    } else {
        char *first = print_or_die(g, "print");
        check_reprints(first, first, "print(parse(print(g))) differs from print(g)");
        gr_graph *copy = NULL;
        if (gr_ir_graph_clone(g, &copy) == GR_OK) { /* else out of memory, which is allowed */
            char *copied = print_or_die(copy, "print of a clone");
            if (strcmp(copied, first)) fail("a clone prints differently from its original", first, copied);
            gr_strfree(copied);
            gr_ir_graph_destroy(copy);
        }

        st = gr_ir_verify(g);
        if (st == GR_OK) st = gr_ir_infer_shapes(g);
        if (st != GR_OK) check_error(st, "verify / infer shapes");
        /* typed or not, the graph prints; the types are comments, so the text
         * reads back to the untyped graph's print */
        char *typed = print_or_die(g, "print after shape inference");
        check_reprints(typed, first, "print after shape inference does not read back to the same graph");
        gr_strfree(typed);
        gr_strfree(first);
        gr_ir_graph_destroy(g);
    }
    if (gr_debug_live_allocs() != live) fail("graft allocations leaked", NULL, NULL);
    free(text);
    return 0;
}
