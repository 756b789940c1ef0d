# Fusion with recomputation, CSE inside kernels, dead-step elimination, fold limits.
graft_test(test_fuse SOURCES tests/test_fuse.c LAYERS graft_util graft_ir graft_codegen graft_passes)
