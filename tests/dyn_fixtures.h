/* tests/dyn_fixtures.h — what test_dynamic and test_generic_onnx share: the dynamic-axis
 * export fixtures (tests/data/onnx/dyn, tests/py/make_dynamic_fixtures.py), the device the
 * test runs on (GRAFT_TEST_DEVICE=cuda on the GPU machine, else the simulator) and binding
 * an input from a fixture's .npy file. Include after check.h and npy.h. */
#ifndef GR_TEST_DYN_FIXTURES_H
#define GR_TEST_DYN_FIXTURES_H
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DYN "tests/data/onnx/dyn/"

static const char *const dyn_cases[] = {"gpt2_dynamo", "bert_dynamo", "bert_torchscript", "llama_dynamo"};

static gr_device_kind test_device(void) {
    const char *d = getenv("GRAFT_TEST_DEVICE");
    return d && !strcmp(d, "cuda") ? GR_DEVICE_CUDA : GR_DEVICE_SIM;
}

static bool set_input_file(gr_session_t s, const char *name, const char *path) {
    npy_array a;
    char err[NPY_ERR_LEN];
    if (npy_read(path, &a, err)) {
        CHECK_MSG(false, "%s", err);
        return false;
    }
    gr_status st = gr_session_set_input(s, name, a.dtype, a.ndim, a.dims, a.data, a.nbytes);
    npy_free(&a);
    CHECK_OK(st);
    return st == GR_OK;
}
#endif
