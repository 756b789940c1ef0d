# The host allocator hook: exact sizes, and the free-size check every C test runs.
graft_test(test_alloc SOURCES tests/test_alloc.c LAYERS graft_util)
