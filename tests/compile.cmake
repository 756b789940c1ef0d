# Compile-time data structures (growing fusion, memory-plan search, name
# indexes, wide .gir nodes) against the simple algorithms they replaced.
graft_test(test_compile_scale SOURCES tests/test_compile_scale.c LAYERS graft_util graft_ir graft_codegen graft_passes graft_frontend)
