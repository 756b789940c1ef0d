/* device/cuda-stub — the CUDA backend when graft is built without it. */
#include "device/device.h"

gr_status gr_device_cuda_create(const char *cache_dir, gr_device **out) {
    (void)cache_dir;
    if (out) *out = NULL;
    return gr_error(GR_ERR_UNSUPPORTED, "graft was built without the CUDA backend");
}

gr_status gr_device_cuda_create_ordinal(const char *cache_dir, int ordinal, gr_device **out) {
    (void)cache_dir;
    (void)ordinal;
    if (out) *out = NULL;
    return gr_error(GR_ERR_UNSUPPORTED, "graft was built without the CUDA backend");
}
