/* frontend/onnx-stub — compiled instead of src/frontend/onnx when protobuf-c
 * is missing: the loaders exist and say why they cannot work. */
#include "frontend/frontend.h"

gr_status gr_onnx_load(const char *path, gr_graph **out) {
    if (out) *out = NULL;
    return gr_error(GR_ERR_UNSUPPORTED, "%s: built without ONNX support (protobuf-c missing)", path ? path : "<onnx>");
}

gr_status gr_onnx_load_buffer(const void *data, size_t n, const char *origin, const char *base_dir, gr_graph **out) {
    (void)data;
    (void)n;
    (void)base_dir;
    if (out) *out = NULL;
    return gr_error(GR_ERR_UNSUPPORTED, "%s: built without ONNX support (protobuf-c missing)", origin ? origin : "<onnx>");
}
