/* codegen/render-cuda — kernel IR (kir.h) to CUDA C for NVRTC.
 *
 * One `extern "C" __global__` function per kernel, named after the kernel,
 * with one 8-byte argument per kir parameter in order: BUFFER → T*,
 * BUFFER_INDIRECT → T* const* (dereferenced once at entry), SCALAR_F → double,
 * SCALAR_I / SHAPE → long long. The source is self-contained (no #include),
 * so NVRTC needs no toolkit headers on the machine that compiles it.
 *
 * Launch shape (gr_render_cuda_launch_dims): elementwise kernels use 256
 * threads and a grid-stride loop over the outer points (4 points per thread
 * when vectorized, 8 when every vectorized buffer has elements of 2 bytes or less); kernels with inner dims or reductions use one block per
 * outer point (grid-stride over blocks) and threads striding over the inner
 * space. Any grid >= 1 is correct, so a captured launch stays valid when the
 * n_points argument changes.
 */
#ifndef GR_RENDER_CUDA_H
#define GR_RENDER_CUDA_H

#include "codegen/kir.h"

/* Appends the CUDA C source of k to sb. GR_ERR_INVALID for a kernel that does not verify
 * or whose name is not a C identifier. Literal mode (gr_render_cuda): every number is a
 * literal, so index math folds to constants (the default: fastest for static models). */
gr_status gr_render_cuda(const gr_kernel *k, gr_strbuf *sb);

/* Generic mode reads every slot of the kernel (kir.h: extents, strides, offsets, gather
 * extents/strides, point counts, constants) from one extra by-value parameter after the
 * kir parameters, `const gr_dims_t gr_dims` (struct { long long v[n]; }, n =
 * gr_kernel_slot_count(k), absent when n == 0), filled with gr_kernel_slot_values. The
 * source is a function of the structure only: kernels of one structure, at any sizes
 * and with any names, render byte-identical source, so one compiled module serves all.
 * Vectorization and address forms follow the layout classes, which are structure;
 * alignment is checked at run time as in literal mode. More than GR_KMAX_SLOTS slots:
 * GR_ERR_UNSUPPORTED (compile such a kernel literally). */
/* GR_RENDER_GENERIC_TABLE (shape policy generic): the same code, but the slots are read from
 * device memory through one pointer parameter after the kir parameters, `const gr_dims_t*
 * gr_dimp` (struct { long long v[n + 1]; }: the slots, then the point count the code is bounded
 * by, in place of the n_points argument), so a captured graph node keeps reading
 * whatever the table holds when it is replayed; entry "gr_t_<hash>"; no GR_KMAX_SLOTS limit. */
typedef enum { GR_RENDER_LITERAL = 0, GR_RENDER_GENERIC, GR_RENDER_GENERIC_TABLE } gr_render_mode;
gr_status gr_render_cuda_mode(const gr_kernel *k, gr_render_mode mode, gr_strbuf *sb);
/* The __global__ function's name in that source: k->name (literal), "gr_g_<16 hex
 * digits of gr_kernel_structure_hash>" (generic) or "gr_t_<...>" (generic table). n >= 64 always suffices. */
void gr_render_cuda_entry_name(const gr_kernel *k, gr_render_mode mode, char *buf, size_t n);

/* A key for caches of rendered/compiled code: the kernel hash mixed with the renderer version. */
uint64_t gr_render_cuda_key(const gr_kernel *k);

/* true: one block per outer point (inner dims or REDUCE stages); false: elementwise. */
bool gr_render_cuda_is_block_kernel(const gr_kernel *k);
/* true: a block kernel whose launches of n_points rows run the warp-row form (rows of at most
 * 1024 points; the form takes any grid and any block of whole warps up to 256 threads). */
bool gr_render_cuda_is_warp_row(const gr_kernel *k, int64_t n_points);
/* true: the elementwise kernel has a 4-wide vectorized main loop. */
bool gr_render_cuda_is_vectorized(const gr_kernel *k);

/* Grid and block for n_points outer points; max_grid caps the grid (>= 1). The same for
 * both modes (the vectorization decision is structure). */
void gr_render_cuda_launch_dims(const gr_kernel *k, int64_t n_points, unsigned max_grid, unsigned *grid,
                                unsigned *block);

#endif
