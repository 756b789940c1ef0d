/* frontend — loaders that turn model files into IR graphs: graft's text IR
 * (.gir, docs/gir.md) and ONNX (protobuf-c over graft's own onnx_subset.proto).
 *
 * A loader builds the graph with the IR's builder functions and types it with
 * the IR's shape inference; it never reaches the passes. Errors name the file
 * and, where there is one, the line:col or the ONNX node.
 */
#ifndef GR_FRONTEND_H
#define GR_FRONTEND_H

#include "ir/ir.h"

/* ---- .gir text ------------------------------------------------------------------------- */
/* Parses .gir text. base_dir resolves `file(...)` side files (NULL = cwd). */
gr_status gr_gir_parse(const char *text, const char *origin, const char *base_dir, gr_graph **out);
gr_status gr_gir_load(const char *path, gr_graph **out);

/* ---- ONNX -------------------------------------------------------------------------------- */
/* Where the ONNX frontend is not built (no protobuf-c), both return
 * GR_ERR_UNSUPPORTED saying so. */
gr_status gr_onnx_load(const char *path, gr_graph **out);
gr_status gr_onnx_load_buffer(const void *data, size_t n, const char *origin, const char *base_dir, gr_graph **out);

#endif
