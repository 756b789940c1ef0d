// Micro-benchmark of graft's generated row kernels against hand-written ones (issue 15):
// each kernel launched R times in one CUDA graph, the graph replayed; time per launch from events.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
struct gr_dims_t { long long v[15]; };
extern "C" __global__ void gr_g_a991a9569e24a8cc(long long, const float*, const float*, unsigned short*, const unsigned short*, const unsigned short*, const gr_dims_t);
extern "C" __global__ void ln_mw1(long long, const float*, const float*, unsigned short*, const unsigned short*, const unsigned short*);
extern "C" __global__ void ln_mw3(long long, const float*, const float*, unsigned short*, const unsigned short*, const unsigned short*);
extern "C" __global__ void ln_hand(long long, const float*, const float*, unsigned short*, const unsigned short*, const unsigned short*);
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
static unsigned fbits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
int main(int argc, char **argv) {
  const int reps = 20, iters = 50;
  const int rows_list[] = {128, 256, 512, 1024, 4096};
  for (int rows : rows_list) {
    const long long n = (long long)rows * 768;
    float *g, *b; unsigned short *x, *y, *o;
    CK(cudaMalloc(&g, 768 * 4)); CK(cudaMalloc(&b, 768 * 4));
    CK(cudaMalloc(&x, n * 2)); CK(cudaMalloc(&y, n * 2)); CK(cudaMalloc(&o, n * 2));
    std::vector<unsigned short> hx(n), hy(n); std::vector<float> hg(768), hb(768);
    srand(1);
    for (long long i = 0; i < n; i++) { float f = (rand() / (float)RAND_MAX - 0.5f) * 4; hx[i] = fbits(f) >> 16; f = (rand() / (float)RAND_MAX - 0.5f); hy[i] = fbits(f) >> 16; }
    for (int i = 0; i < 768; i++) { hg[i] = 0.5f + rand() / (float)RAND_MAX; hb[i] = rand() / (float)RAND_MAX - 0.5f; }
    CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(y, hy.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(g, hg.data(), 768 * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(b, hb.data(), 768 * 4, cudaMemcpyHostToDevice));
    gr_dims_t d = {{1, rows, 0, 768, 0, 768, 0, 768, fbits(768.f), fbits(9.99999975e-06f), 0, 0, 0, (long long)rows * 768, 768}};
    std::vector<unsigned short> ref(n), got(n), ref3(n);
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char *names[] = {"generic 8 rows/blk", "hand 8 rows/blk", "hand 1 row/blk (32 thr)", "mw1 8 rows/blk", "mw1 1 row/blk", "mw3 1 row/blk (96 thr)", "mw3 grid/2"};
    for (int v = 0; v < 7; v++) {
      auto launch = [&]() {
        switch (v) {
        case 0: gr_g_a991a9569e24a8cc<<<(rows + 7) / 8, 256, 0, s>>>(rows, g, b, o, x, y, d); break;
        case 1: ln_hand<<<(rows + 7) / 8, 256, 0, s>>>(rows, g, b, o, x, y); break;
        case 2: ln_hand<<<rows, 32, 0, s>>>(rows, g, b, o, x, y); break;
        case 3: ln_mw1<<<(rows + 7) / 8, 256, 0, s>>>(rows, g, b, o, x, y); break;
        case 4: ln_mw1<<<rows, 32, 0, s>>>(rows, g, b, o, x, y); break;
        case 5: ln_mw3<<<rows, 96, 0, s>>>(rows, g, b, o, x, y); break;
        case 6: ln_mw3<<<(rows+1)/2, 96, 0, s>>>(rows, g, b, o, x, y); break;
        }
      };
      CK(cudaMemsetAsync(o, 0, n * 2, s)); launch(); CK(cudaStreamSynchronize(s)); CK(cudaGetLastError());
      CK(cudaMemcpy(v == 0 ? ref.data() : got.data(), o, n * 2, cudaMemcpyDeviceToHost));
      long long diff = 0; if (v) for (long long i = 0; i < n; i++) diff += got[i] != ref[i];
      if (v == 3) ref3 = got; long long d3 = 0; if (v > 3) for (long long i = 0; i < n; i++) d3 += got[i] != ref3[i];
      cudaGraph_t gr; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int r = 0; r < reps; r++) launch();
      CK(cudaStreamEndCapture(s, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0));
      cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
      for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, s));
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < iters; i++) CK(cudaGraphLaunch(ge, s));
      CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
      printf("{\"kernel\": \"layer_norm+add bf16 x768\", \"rows\": %d, \"variant\": \"%s\", \"us_per_launch\": %.3f, \"elements_differing_from_generic\": %lld, \"differing_from_mw1\": %lld}\n",
             rows, names[v], ms * 1000 / (iters * reps), diff, d3);
      cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
    }
    cudaFree(g); cudaFree(b); cudaFree(x); cudaFree(y); cudaFree(o);
  }
  return 0;
}
