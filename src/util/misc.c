/* util/misc — hashing, shapes, files, clocks. */
#include "util/util.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

uint64_t gr_hash_bytes(const void *p, size_t n, uint64_t seed) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

int64_t gr_shape_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    return n;
}

bool gr_shape_numel_checked(int ndim, const int64_t *dims, int64_t *numel) {
    int64_t nonzero = 1;
    bool empty = false;
    *numel = 0;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return false;
        if (dims[i] == 0) {
            empty = true;
            continue;
        }
        if (gr_mul_overflow(nonzero, dims[i], &nonzero) || nonzero > GR_MAX_NUMEL) return false;
    }
    *numel = empty ? 0 : nonzero;
    return true;
}

gr_status gr_read_file(const char *path, char **out, size_t *out_n) {
    *out = NULL;
    if (out_n) *out_n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return gr_error(GR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sbuf;
    if (fstat(fileno(f), &sbuf) != 0 || !S_ISREG(sbuf.st_mode)) {
        fclose(f);
        return gr_error(GR_ERR_IO, "cannot read '%s': not a regular file", path);
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return gr_error(GR_ERR_IO, "cannot read '%s': not a regular file", path);
    }
    long size = ftell(f);
    if (size < 0) {
        fclose(f);
        return gr_error(GR_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    }
    rewind(f);
    char *buf = gr_malloc((size_t)size + 1);
    if (!buf) {
        fclose(f);
        return GR_ERR_NOMEM;
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    int err = ferror(f);
    fclose(f);
    if (got != (size_t)size || err) {
        gr_free(buf, (size_t)size + 1);
        return gr_error(GR_ERR_IO, "cannot read '%s': short read (%zu of %ld bytes)", path, got, size);
    }
    buf[size] = 0;
    *out = buf;
    if (out_n) *out_n = (size_t)size;
    return GR_OK;
}

double gr_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}
