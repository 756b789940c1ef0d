# Reliability: on-disk cache files, sessions on several threads, the soak test.
include_guard(GLOBAL)
graft_test(test_cachefile SOURCES tests/test_cachefile.c src/device/cuda/cuda-cache.c LAYERS graft_util)
graft_test(test_threads SOURCES tests/test_threads.c)
if(GRAFT_TSAN)
  # history_size=7: keep enough of each thread's history that a race's earlier
  # access can be reported (with less, clang 14 dropped races in gr_malloc).
  set_tests_properties(test_threads PROPERTIES ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:history_size=7")
endif()
# The soak test: a million graph-mode runs (minutes). Labelled `slow` and named
# without the test_ prefix, so no stage of scripts/test.sh runs it; run it with
# `ctest --test-dir build -L slow --output-on-failure`.
add_executable(test_soak tests/test_soak.c)
target_link_libraries(test_soak graft)
target_include_directories(test_soak PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
set_target_properties(test_soak PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME soak COMMAND test_soak WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(soak PROPERTIES LABELS slow TIMEOUT 7200)
