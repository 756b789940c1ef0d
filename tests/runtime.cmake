graft_test(test_runtime SOURCES tests/test_runtime.c)
