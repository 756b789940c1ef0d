# .gir text format: parser and printer
graft_test(test_gir SOURCES tests/test_gir.c LAYERS graft_util graft_ir graft_frontend)
