/* tools/npy — NumPy .npy files for the graft CLI.
 *
 * Reads format versions 1.0, 2.0 and 3.0, little-endian (or byte-order free)
 * `<f4 <f2 <f8 <i8 <i4 |i1 |u1 |b1`, C order only. Writes version 1.0 (2.0
 * when the header would not fit). bfloat16 is not a NumPy type: npy_write
 * refuses GR_BF16 and the caller converts to f32 first.
 *
 * Errors come back as a message in a caller buffer that names the file:
 * "x.npy: data truncated: the shape needs 4096 bytes, the file has 12". */
#ifndef GRAFT_TOOLS_NPY_H
#define GRAFT_TOOLS_NPY_H

#include "graft.h"
#include <stddef.h>
#include <stdint.h>

#define NPY_ERR_LEN 512

typedef struct {
    gr_dtype dtype;
    int ndim;
    int64_t dims[GR_MAX_DIMS];
    void *data;     /* malloc'd; NULL when nbytes is 0 */
    size_t nbytes;  /* numel * dtype size */
} npy_array;

/* Returns 0 on success; on failure fills err (NPY_ERR_LEN bytes) and returns -1.
 * On failure *out is left empty (nothing to free). Only a regular file is read (a FIFO or a
 * device is refused without blocking), the header is at most 64 KiB, its element and byte
 * counts must fit int64, and the data must fill the rest of the file exactly. */
int npy_read(const char *path, npy_array *out, char *err);
/* Parses an in-memory .npy image; `origin` names it in messages. */
int npy_parse(const unsigned char *buf, size_t n, const char *origin, npy_array *out, char *err);
void npy_free(npy_array *a);

/* Writes data (nbytes must equal numel * dtype size) as a .npy file. */
int npy_write(const char *path, gr_dtype dtype, int ndim, const int64_t *dims, const void *data, size_t nbytes,
              char *err);

/* "<f4" for GR_F32 ...; NULL for dtypes NumPy cannot hold (bf16). */
const char *npy_descr(gr_dtype dtype);

#endif
