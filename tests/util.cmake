# util: bounded file reads (regular files only) and escaped messages
graft_test(test_util SOURCES tests/test_util.c LAYERS graft_util)
