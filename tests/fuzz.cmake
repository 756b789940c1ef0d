# Fuzzing of the whole pipeline (tests/fuzz/README.md):
#   gir_fuzz:  .gir text -> parse -> print -> parse -> print (a fixed point), verifier, shape inference
#   diff_fuzz: .gir text -> sessions on the simulator in eager and in graph mode -> same statuses, same bits
# Every build replays the seed corpora through both targets with a small
# driver (tests/fuzz/replay.c), so they are regression tests without libFuzzer.
# With GRAFT_FUZZ=ON under clang the same targets are also built for libFuzzer,
# with bounded smoke runs (the clang stage of scripts/test.sh runs them).
# The ONNX loader's libFuzzer build lives in tests/onnx.cmake; its corpus is
# replayed here too.

set(graft_fuzz_src ${CMAKE_SOURCE_DIR}/tests/fuzz)
# Seeds: the hand-made corpora plus every .gir the project ships or tests with.
# A reproducer of a crash that is not fixed yet waits in tests/fuzz/crashes/,
# which no replay reads (tests/fuzz/README.md).
set(gir_fuzz_seeds ${graft_fuzz_src}/corpus/gir ${graft_fuzz_src}/corpus/diff
                   ${CMAKE_SOURCE_DIR}/examples ${CMAKE_SOURCE_DIR}/tests/data/gir)
set(diff_fuzz_seeds ${graft_fuzz_src}/corpus/diff ${graft_fuzz_src}/corpus/gir ${CMAKE_SOURCE_DIR}/examples
                    ${CMAKE_SOURCE_DIR}/tests/data/gir)

set(onnx_fuzz_seeds ${graft_fuzz_src}/corpus/onnx)
set(graft_fuzz_replayed gir_fuzz diff_fuzz)
if(GRAFT_ONNX_ENABLED)
  list(APPEND graft_fuzz_replayed onnx_fuzz)
endif()
foreach(target ${graft_fuzz_replayed})
  add_executable(${target}_replay tests/fuzz/${target}.c tests/fuzz/replay.c)
  target_link_libraries(${target}_replay graft)
  # white-box like the other tests: the targets use IR internals (the library's layers do not see src/)
  target_include_directories(${target}_replay PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  set_target_properties(${target}_replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${target}_replay COMMAND ${target}_replay ${${target}_seeds} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
endforeach()

if(GRAFT_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  # The library compiled once more with coverage instrumentation for libFuzzer
  # (the shared layer objects stay uninstrumented). Stubs stand in for the CUDA
  # backend and the ONNX frontend: these targets run the simulator on .gir text.
  file(GLOB graft_fuzz_lib_srcs CONFIGURE_DEPENDS
       ${CMAKE_SOURCE_DIR}/src/util/*.c ${CMAKE_SOURCE_DIR}/src/ir/*.c ${CMAKE_SOURCE_DIR}/src/frontend/*.c
       ${CMAKE_SOURCE_DIR}/src/passes/*.c ${CMAKE_SOURCE_DIR}/src/codegen/*.c ${CMAKE_SOURCE_DIR}/src/device/*.c
       ${CMAKE_SOURCE_DIR}/src/device/sim/*.c ${CMAKE_SOURCE_DIR}/src/runtime/*.c
       ${CMAKE_SOURCE_DIR}/src/device/cuda-stub/*.c ${CMAKE_SOURCE_DIR}/src/frontend/onnx-stub/*.c)
  add_library(graft_fuzz_lib OBJECT ${graft_fuzz_lib_srcs})
  target_include_directories(graft_fuzz_lib PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  target_compile_options(graft_fuzz_lib PRIVATE -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined)

  foreach(target gir_fuzz diff_fuzz)
    add_executable(${target} tests/fuzz/${target}.c $<TARGET_OBJECTS:graft_fuzz_lib>)
    target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${target} m ${CMAKE_DL_LIBS} pthread)
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    # New inputs go to the first (scratch) corpus folder, never into the source tree.
    set(work ${CMAKE_BINARY_DIR}/fuzz/${target}-corpus)
    file(MAKE_DIRECTORY ${work} ${CMAKE_BINARY_DIR}/fuzz/${target}-artifacts)
    add_test(NAME ${target}_smoke
             COMMAND ${target} ${work} ${${target}_seeds}
                     -dict=${graft_fuzz_src}/gir.dict -max_total_time=30 -rss_limit_mb=2048 -max_len=16384 -timeout=10
                     -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz/${target}-artifacts/
             WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  endforeach()
endif()
