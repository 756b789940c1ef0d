# Kernel IR interpreter, matmul reference and the simulator device.
graft_test(test_interp SOURCES tests/test_interp.c LAYERS graft_util graft_codegen)
graft_test(test_sim SOURCES tests/test_sim.c LAYERS graft_util graft_codegen graft_device graft_sim graft_cuda)
graft_test(test_devgraph SOURCES tests/test_devgraph.c)
# Shape-generic kernels: one source per structure, sessions of a symbolic model at new lengths.
graft_test(test_generic SOURCES tests/test_generic.c)
