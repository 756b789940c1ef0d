# Reliability: on-disk cache files, sessions on several threads, the soak test.
include_guard(GLOBAL)
graft_test(test_cachefile SOURCES tests/test_cachefile.c src/device/cuda/cuda-cache.c LAYERS graft_util)
