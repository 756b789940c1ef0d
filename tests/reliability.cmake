# Reliability: on-disk cache files, sessions on several threads, the soak test.
include_guard(GLOBAL)
graft_test(test_cachefile SOURCES tests/test_cachefile.c src/device/cuda/cuda-cache.c LAYERS graft_util)
graft_test(test_threads SOURCES tests/test_threads.c)
if(GRAFT_TSAN)
  # history_size=7: keep enough of each thread's history that a race's earlier
  # access can be reported (with less, clang 14 dropped races in gr_malloc).
  set_tests_properties(test_threads PROPERTIES ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:history_size=7")
endif()
