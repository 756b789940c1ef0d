#!/usr/bin/env bash
# Builds graft and runs every test: a normal build (gcc), the sanitizer build
# (ASan + UBSan), then a clang build (-Werror) with a bounded libFuzzer run of
# the ONNX loader, then ThreadSanitizer on the thread test alone. Each stage
# ends with ctest's summary line. Tests labelled `slow` (the soak test) are
# left out; run them with `ctest --test-dir build -L slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

echo "== build (release) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
echo "== tests (release) =="
ctest --test-dir build --output-on-failure -j"$jobs" -LE slow

echo "== build (ASan + UBSan) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGRAFT_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE slow

echo "== build (clang, -Werror; libFuzzer target) =="
CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAFT_FUZZ=ON >/dev/null
cmake --build build-clang -j"$jobs"
echo "== tests (clang: C unit tests and bounded fuzz runs: ONNX loader, .gir reader, eager vs graph) =="
ctest --test-dir build-clang --output-on-failure -j"$jobs" -R '^(test_|(onnx|gir|diff)_fuzz_smoke)'

echo "== build (clang, ThreadSanitizer; the thread test only) =="
CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAFT_TSAN=ON >/dev/null
cmake --build build-tsan -j"$jobs" --target test_threads
echo "== tests (ThreadSanitizer: sessions on several threads) =="
ctest --test-dir build-tsan --output-on-failure -R '^test_threads$'
