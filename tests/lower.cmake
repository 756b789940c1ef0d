# Lowering of IR ops to kernels / library calls / views, and fusion.
graft_test(test_lower SOURCES tests/test_lower.c LAYERS graft_util graft_ir graft_codegen graft_passes)
