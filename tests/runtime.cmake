graft_test(test_runtime SOURCES tests/test_runtime.c)
graft_test(test_graphmgr SOURCES tests/test_graphmgr.c)
graft_test(test_devio SOURCES tests/test_devio.c)
graft_test(test_shapes SOURCES tests/test_shapes.c)
