/* libFuzzer target: any bytes through the ONNX loader. Bad input must come
 * back as a status, never a crash, leak or sanitizer report. External data
 * resolves against a directory that does not exist, so no file is read. */
#include "frontend/frontend.h"
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gr_graph *g = NULL;
    gr_status st = gr_onnx_load_buffer(data, size, "fuzz.onnx", "/nonexistent-graft-fuzz-dir", &g);
    if (st == GR_OK) {
        char *text = NULL;
        if (gr_gir_print(g, 16, NULL, &text) == GR_OK) gr_strfree(text);
    }
    gr_ir_graph_destroy(g);
    return 0;
}
