# ONNX frontend: loader, op mapping, import-time folding, bad input; fuzz target.
# test_onnx builds from its own sources (IR core + verifier + shape pass) so it
# does not depend on the state of the other passes.
if(GRAFT_ONNX_ENABLED)
  graft_test(test_onnx
    SOURCES tests/test_onnx.c
    LAYERS graft_util graft_ir graft_frontend)
  # one session over every binding of the dynamic-axis exports (tests/data/onnx/dyn)
  graft_test(test_dynamic SOURCES tests/test_dynamic.c tools/npy.c)
  target_include_directories(test_dynamic PRIVATE ${CMAKE_SOURCE_DIR}/tools)
  # ...where a new length of a seen size class compiles nothing (shape-generic kernels)
  graft_test(test_generic_onnx SOURCES tests/test_generic_onnx.c tools/npy.c)
  target_include_directories(test_generic_onnx PRIVATE ${CMAKE_SOURCE_DIR}/tools)
  # ...and where a plan built in memory earlier plans reused equals a fresh build
  graft_test(test_plan_reuse SOURCES tests/test_plan_reuse.c tools/npy.c)
  target_include_directories(test_plan_reuse PRIVATE ${CMAKE_SOURCE_DIR}/tools)
  # ...and where a plan instantiated from a template equals the pipeline's (runtime/template.c)
  graft_test(test_plan_template SOURCES tests/test_plan_template.c)
  # decoder steps with a KV cache: the rewritten single-shape step against the per-length one
  graft_test(test_decode SOURCES tests/test_decode.c tools/npy.c)
  target_include_directories(test_decode PRIVATE ${CMAKE_SOURCE_DIR}/tools)
  # examples/cnn.onnx in one session at several batch sizes, eager and graph
  graft_test(test_cnn_session SOURCES tests/test_cnn_session.c)
  # data-dependent output shapes (NonZero, Range, Loop over run-time counts) in one session
  graft_test(test_datadep SOURCES tests/test_datadep.c)

  # pytest end to end (needs the graft CLI; skips itself when it is missing)
  find_program(GRAFT_PYTEST NAMES pytest pytest-3)
  if(GRAFT_PYTEST)
    add_test(NAME onnx_pytest COMMAND ${GRAFT_PYTEST} -q ${CMAKE_SOURCE_DIR}/tests/py/test_onnx_import.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_pytest PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft")
    # GPT-2 / BERT / T5 as PyTorch exports them: the saved fixtures in
    # tests/data/onnx/hf always run (numpy only); the live exports skip
    # themselves, saying why, where torch/transformers are not installed.
    add_test(NAME onnx_hf_fixtures
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_hf_models.py -k "fixture"
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    add_test(NAME onnx_hf_torch
             COMMAND ${GRAFT_PYTEST} -q -rs -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_hf_models.py -k "torch"
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_hf_fixtures onnx_hf_torch PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft")
    # symbolic shapes: dynamic-axis GPT-2 / BERT / Llama exports (tests/data/onnx/dyn, PyTorch's
    # outputs at several bindings) and onnx.helper idioms against onnx.reference, every length
    add_test(NAME onnx_dynamic
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_dynamic_models.py
                     ${CMAKE_SOURCE_DIR}/tests/py/test_onnx_symbolic.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_dynamic PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft")
    # the convolution family (Conv, ConvTranspose, pools, normalizations, Pad, Resize, examples/cnn.onnx)
    add_test(NAME onnx_conv
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_onnx_conv.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_conv PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft;PYTHONDONTWRITEBYTECODE=1")
    set_tests_properties(onnx_hf_torch PROPERTIES TIMEOUT 900)
    # model-breadth ops on run-time tensors (ArgMax, TopK, Mod, Tile, OneHot, Scatter*, GatherND, ...)
    add_test(NAME onnx_breadth
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_onnx_breadth.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_breadth PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft")
    # data-dependent output shapes (NonZero, Range on run-time scalars, Loop with a run-time trip
    # count): many values through one session (the Python package), eager and graph, and explain
    # (through the Python package: like the other ctypes tests, not in sanitizer builds, where
    # the instrumented library cannot be loaded into an uninstrumented Python)
    if(NOT GRAFT_SANITIZE AND NOT GRAFT_TSAN)
      add_test(NAME onnx_datadep
               COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_onnx_datadep.py
               WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
      set_tests_properties(onnx_datadep PROPERTIES ENVIRONMENT
        "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft;PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>;PYTHONDONTWRITEBYTECODE=1")
    endif()
    # activations and rounding exporters emit (Clip, HardSwish, LeakyRelu, PRelu, Elu, Round, LogSoftmax, ...)
    add_test(NAME onnx_activations
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_onnx_activations.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_activations PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft")
    # matmul epilogues from ONNX (GPT-2's tanh-GELU chain, Gelu tanh, Relu): fused, and equal to unfused
    add_test(NAME onnx_epilogue
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_epilogue_onnx.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    # (the Python package case where the library can be loaded into Python: not sanitizer builds)
    if(NOT GRAFT_SANITIZE AND NOT GRAFT_TSAN)
      set_tests_properties(onnx_epilogue PROPERTIES ENVIRONMENT
        "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft;PYTHONPATH=${CMAKE_SOURCE_DIR}/python;GRAFT_LIBRARY=$<TARGET_FILE:graft_shared>;PYTHONDONTWRITEBYTECODE=1")
    else()
      set_tests_properties(onnx_epilogue PROPERTIES ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft")
    endif()
    # the torch-free half of scripts/real-models-check.sh (tests/py/check_real_models.py) on the
    # committed exports and doctored copies; the export half needs torch (GPU machine)
    add_test(NAME onnx_real_models_check
             COMMAND ${GRAFT_PYTEST} -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/tests/py/test_real_models_check.py
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_real_models_check PROPERTIES
                         ENVIRONMENT "GRAFT_BIN=${CMAKE_BINARY_DIR}/bin/graft;PYTHONDONTWRITEBYTECODE=1" TIMEOUT 600)
    # torch-free copies of four real exports (tests/data/onnx/real: CLIP text, DeBERTa-v2, Whisper
    # encoder, XLNet; made on the H100 by tests/py/make_real_models.py with PyTorch's outputs),
    # eager and graph on the simulator against PyTorch (bench/models/2026-11-23-h100)
    add_test(NAME onnx_real_fixtures
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/py/check_real_models.py ${CMAKE_SOURCE_DIR}/tests/data/onnx/real
                     --graft ${CMAKE_BINARY_DIR}/bin/graft --devices sim
             WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(onnx_real_fixtures PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" TIMEOUT 600)
  endif()

  # ONNX's own node test cases for every op graft imports (tests/py/onnx_conformance.py):
  # every case of a supported op must pass; prints "N passed, N failed, N skipped".
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy, onnx"
                    RESULT_VARIABLE graft_conformance_deps OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(NOT Python3_FOUND OR NOT graft_conformance_deps EQUAL 0)
    message(STATUS "graft: no Python 3 with numpy + onnx; onnx_conformance is skipped")
  else()
    add_test(NAME onnx_conformance
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/py/onnx_conformance.py
                     --graft ${CMAKE_BINARY_DIR}/bin/graft --device sim
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(onnx_conformance PROPERTIES TIMEOUT 300)
  endif()
endif()

# libFuzzer target: gr_onnx_load_buffer on arbitrary bytes (clang only).
if(GRAFT_FUZZ AND GRAFT_ONNX_ENABLED AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  # The loader's sources are compiled again for the fuzzer (with coverage), so the
  # shared object libraries other targets link stay uninstrumented.
  file(GLOB fuzz_util_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/util/*.c)
  file(GLOB fuzz_ir_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ir/*.c)
  file(GLOB fuzz_onnx_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/frontend/*.c ${CMAKE_SOURCE_DIR}/src/frontend/onnx/*.c)
  add_executable(onnx_fuzz tests/fuzz/onnx_fuzz.c ${fuzz_ir_srcs} ${fuzz_util_srcs} ${fuzz_onnx_srcs}
                 ${GRAFT_ONNX_GEN_DIR}/onnx_subset.pb-c.c)
  target_include_directories(onnx_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/include ${GRAFT_VIEWS}/graft_frontend
                             ${GRAFT_ONNX_GEN_DIR} ${GRAFT_PROTOBUFC_INCLUDE})
  target_compile_options(onnx_fuzz PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  target_link_options(onnx_fuzz PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(onnx_fuzz ${GRAFT_PROTOBUFC_LIB} m)
  set_target_properties(onnx_fuzz PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # New inputs go to the first (scratch) corpus folder, never into the source tree.
  set(onnx_fuzz_work ${CMAKE_BINARY_DIR}/fuzz/onnx-corpus)
  file(MAKE_DIRECTORY ${onnx_fuzz_work} ${CMAKE_BINARY_DIR}/fuzz/onnx-artifacts)
  add_test(NAME onnx_fuzz_smoke
           COMMAND onnx_fuzz ${onnx_fuzz_work} ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/onnx
                   -max_total_time=30 -rss_limit_mb=2048 -max_len=65536 -timeout=10
                   -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz/onnx-artifacts/
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
