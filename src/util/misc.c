/* util/misc — hashing, shapes, files, clocks. */
#include "util/util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

gr_status gr_open_regular(const char *path, int *out_fd, uint64_t *out_size) {
    *out_fd = -1;
    *out_size = 0;
    /* O_NONBLOCK: opening a FIFO without a writer must not wait for one; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return gr_error(GR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        gr_status st = gr_error(GR_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return gr_error(GR_ERR_IO, "cannot read '%s': it is %s, not a regular file", path, file_kind(sb.st_mode));
    }
    *out_fd = fd;
    *out_size = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
    return GR_OK;
}

gr_status gr_read_at(int fd, const char *path, void *dst, size_t n, uint64_t offset) {
    size_t done = 0;
    while (done < n) {
        if (offset + done > (uint64_t)INT64_MAX) break;
        ssize_t got = pread(fd, (char *)dst + done, n - done, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return gr_error(GR_ERR_IO, "cannot read '%s': %s (at byte %llu)", path, strerror(errno),
                            (unsigned long long)(offset + done));
        if (got == 0) break; /* the file shrank since it was measured */
        done += (size_t)got;
    }
    if (done != n)
        return gr_error(GR_ERR_IO, "cannot read '%s': short read (%zu of %zu bytes at offset %llu)", path, done, n,
                        (unsigned long long)offset);
    return GR_OK;
}

gr_status gr_read_file(const char *path, char **out, size_t *out_n) {
    *out = NULL;
    if (out_n) *out_n = 0;
    int fd;
    uint64_t size;
    GR_TRY(gr_open_regular(path, &fd, &size));
    /* the file's size as measured bounds the read: a file that grows meanwhile is not followed */
    if (size >= SIZE_MAX || size > (uint64_t)INT64_MAX) {
        close(fd);
        return gr_error(GR_ERR_IO, "cannot read '%s': too large (%llu bytes)", path, (unsigned long long)size);
    }
    char *buf = gr_malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return GR_ERR_NOMEM;
    }
    gr_status st = gr_read_at(fd, path, buf, (size_t)size, 0);
    close(fd);
    if (st != GR_OK) {
        gr_free(buf, (size_t)size + 1);
        return st;
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
