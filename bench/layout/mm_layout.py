#!/usr/bin/env python3
"""Weight layout for cuBLAS on this GPU: y = x @ W with W stored [K, N] (what graft hands cuBLASLt
for an ONNX MatMul whose weight initializer is [K, N]: "NN") against W stored [N, K] and read
transposed (PyTorch's nn.Linear: "TN"), for the projection shapes of GPT-2 small and the
Llama-style model of bench/realsize.py, M = batch x seq in {128, 1024, 4096}, bf16 and f32.
CUDA-event timing of 200 back-to-back calls after warm-up. Writes mm_layout.json into --out.
"""
import argparse
import json
import os

import torch

SHAPES = {  # (K, N) of each projection
    "gpt2": [(768, 2304), (768, 768), (768, 3072), (3072, 768)],
    "llama": [(768, 768), (768, 256), (768, 2048), (2048, 768), (768, 32000)],
}


def timed(fn, iters=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters * 1e3  # us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for model, shapes in SHAPES.items():
            for m in (128, 1024, 4096):
                for k, n in shapes:
                    x = torch.randn(m, k, device="cuda", dtype=dtype)
                    w_kn = torch.randn(k, n, device="cuda", dtype=dtype)
                    w_nk = w_kn.t().contiguous()
                    nn_us = timed(lambda: torch.mm(x, w_kn))
                    tn_us = timed(lambda: torch.mm(x, w_nk.t()))
                    rows.append(dict(dtype=str(dtype).split(".")[1], model=model, m=m, k=k, n=n, nn_us=nn_us, tn_us=tn_us))
                    print("%-8s %-5s M=%-5d K=%-5d N=%-6d  W[K,N] %8.1f us   W[N,K]^T %8.1f us   ratio %.2f" % (
                        rows[-1]["dtype"], model, m, k, n, nn_us, tn_us, nn_us / tn_us), flush=True)
    with open(os.path.join(args.out, "mm_layout.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
