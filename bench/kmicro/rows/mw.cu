// multi-warp row: W warps per row of 768 (3 chunks of 8 bf16 per lane-slot); chunk c handled by warp c % W.
// order: per-chunk sums (8 points sequential), chunks summed in order 0,1,2, then butterfly over lanes.
#include <cuda_runtime.h>
static __device__ __forceinline__ float bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
static __device__ __forceinline__ unsigned short f2bf(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
struct alignas(16) v8h { unsigned short v[8]; };
static __device__ __forceinline__ float wsum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return __shfl_sync(0xffffffffu, v, 0);
}
template <int W>
static __device__ __forceinline__ void body(long long n, const float* __restrict__ g, const float* __restrict__ b,
    unsigned short* __restrict__ out, const unsigned short* __restrict__ x, const unsigned short* __restrict__ y) {
  constexpr int C = 3, Q = (C + W - 1) / W;
  __shared__ float sh[2][C][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    v8h a[Q], c[Q]; float v[Q][8]; float s[Q];
#pragma unroll
    for (int q = 0; q < Q; q++) { const int ch = w + q * W; if (ch < C) { const int r0 = (ch * 32 + lane) * 8;
      a[q] = *reinterpret_cast<const v8h*>(x + row * 768 + r0); c[q] = *reinterpret_cast<const v8h*>(y + row * 768 + r0); } }
#pragma unroll
    for (int q = 0; q < Q; q++) { const int ch = w + q * W; s[q] = 0.f; if (ch < C) {
#pragma unroll
      for (int e = 0; e < 8; e++) { v[q][e] = bf2f(f2bf(bf2f(a[q].v[e]) + bf2f(c[q].v[e]))); s[q] += v[q][e]; } } }
    float tot;
    if (W == 1) { tot = s[0]; for (int q = 1; q < Q; q++) tot += s[q]; }
    else {
#pragma unroll
      for (int q = 0; q < Q; q++) { const int ch = w + q * W; if (ch < C) sh[0][ch][lane] = s[q]; }
      __syncthreads(); tot = sh[0][0][lane];
#pragma unroll
      for (int ch = 1; ch < C; ch++) tot += sh[0][ch][lane];
    }
    const float mean = wsum(tot) / 768.f;
#pragma unroll
    for (int q = 0; q < Q; q++) { const int ch = w + q * W; s[q] = 0.f; if (ch < C) {
#pragma unroll
      for (int e = 0; e < 8; e++) { const float d = v[q][e] - mean; s[q] += d * d; } } }
    if (W == 1) { tot = s[0]; for (int q = 1; q < Q; q++) tot += s[q]; }
    else {
#pragma unroll
      for (int q = 0; q < Q; q++) { const int ch = w + q * W; if (ch < C) sh[1][ch][lane] = s[q]; }
      __syncthreads(); tot = sh[1][0][lane];
#pragma unroll
      for (int ch = 1; ch < C; ch++) tot += sh[1][ch][lane];
    }
    const float sd = sqrtf(wsum(tot) / 768.f + 9.99999975e-06f);
#pragma unroll
    for (int q = 0; q < Q; q++) { const int ch = w + q * W; if (ch < C) { const int r0 = (ch * 32 + lane) * 8;
      float4 g0 = *reinterpret_cast<const float4*>(g + r0), g1 = *reinterpret_cast<const float4*>(g + r0 + 4);
      float4 b0 = *reinterpret_cast<const float4*>(b + r0), b1 = *reinterpret_cast<const float4*>(b + r0 + 4);
      const float gq[8] = {g0.x,g0.y,g0.z,g0.w,g1.x,g1.y,g1.z,g1.w}, bq[8] = {b0.x,b0.y,b0.z,b0.w,b1.x,b1.y,b1.z,b1.w};
      v8h o;
#pragma unroll
      for (int e = 0; e < 8; e++) o.v[e] = f2bf((v[q][e] - mean) / sd * gq[e] + bq[e]);
      *reinterpret_cast<v8h*>(out + row * 768 + r0) = o; } }
    if (W > 1) __syncthreads();
  }
}
extern "C" __global__ void __launch_bounds__(256) ln_mw1(long long n, const float* g, const float* b, unsigned short* o, const unsigned short* x, const unsigned short* y) { body<1>(n, g, b, o, x, y); }
extern "C" __global__ void __launch_bounds__(256) ln_mw3(long long n, const float* g, const float* b, unsigned short* o, const unsigned short* x, const unsigned short* y) { body<3>(n, g, b, o, x, y); }
