/* util/cache-file — entries written atomically (temporary file + rename),
 * read back with validation. See cache-file.h for the layout. */
#include "util/cache-file.h"
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char cache_magic[8] = {'g', 'r', 'a', 'f', 't', 'C', 'F', '\n'};

/* ==== encoding ================================================================================= */


/* The checksum covers the header fields too, so a flipped kind or key byte
 * reads as corruption rather than as an entry for something else. */
static uint64_t entry_checksum(const unsigned char *header, const void *payload, size_t n) {
    return gr_hash_bytes(payload, n, gr_hash_bytes(header, 32, 0));
}

/* ==== directories ================================================================================ */

static gr_status make_dir(const char *path) {
    if (mkdir(path, 0755) == 0) return GR_OK;
    int err = errno;
    struct stat sbuf;
    if (err == EEXIST && stat(path, &sbuf) == 0 && S_ISDIR(sbuf.st_mode)) return GR_OK;
    if (err == EEXIST) return gr_error(GR_ERR_IO, "cannot make directory '%s': a file of that name is in the way", path);
    return gr_error(GR_ERR_IO, "cannot make directory '%s': %s", path, strerror(err));
}

gr_status gr_mkdir_p(const char *path) {
    if (!path || !path[0]) return gr_error(GR_ERR_INVALID, "empty directory name");
    char *buf = gr_strdup(path);
    if (!buf) return GR_ERR_NOMEM;
    gr_status st = GR_OK;
    for (char *p = buf + 1; *p && st == GR_OK; p++) {
        if (*p != '/' || p[-1] == '/') continue;
        *p = 0;
        st = make_dir(buf);
        *p = '/';
    }
    if (st == GR_OK) st = make_dir(buf);
    gr_strfree(buf);
    return st;
}

/* ==== write ======================================================================================= */

static bool write_all(int fd, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Unique per process (pid), per call within it (counter: threads of one
 * process share the pid) and per pid reuse across a crash (random bits). */
static char *temp_name(const char *path) {
    static atomic_ulong counter;
    unsigned long c = atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t mix[4] = {(uint64_t)getpid(), c, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                       (uint64_t)(uintptr_t)&ts};
    uint64_t rnd = gr_hash_bytes(mix, sizeof mix, 0x746d70ull);
    return gr_sprintf("%s.tmp.%ld.%lu.%08llx", path, (long)getpid(), c, (unsigned long long)(rnd & 0xffffffffull));
}

gr_status gr_cache_file_write(const char *path, uint32_t kind, uint64_t key, const void *payload, size_t n) {
    if (!path || !path[0]) return gr_error(GR_ERR_INVALID, "cache file: empty path");
    if (!payload && n) return gr_error(GR_ERR_INVALID, "cache file '%s': no payload", path);
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        char *dir = gr_strndup(path, (size_t)(slash - path));
        if (!dir) return GR_ERR_NOMEM;
        gr_status st = gr_mkdir_p(dir);
        gr_strfree(dir);
        if (st != GR_OK) return gr_error_prefix(st, "cannot write cache file '%s'", path);
    }
    unsigned char header[GR_CACHE_FILE_HEADER_BYTES];
    memcpy(header, cache_magic, sizeof cache_magic);
    gr_le_put_u32(header + 8, GR_CACHE_FILE_VERSION);
    gr_le_put_u32(header + 12, kind);
    gr_le_put_u64(header + 16, key);
    gr_le_put_u64(header + 24, (uint64_t)n);
    gr_le_put_u64(header + 32, entry_checksum(header, payload ? payload : "", n));

    char *tmp = NULL;
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        gr_strfree(tmp);
        tmp = temp_name(path);
        if (!tmp) return GR_ERR_NOMEM;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        gr_status st = gr_error(GR_ERR_IO, "cannot write cache file '%s': %s", path, strerror(errno));
        gr_strfree(tmp);
        return st;
    }
    /* No fsync: after a crash the entry may be short or empty, which the
     * reader's length and checksum refuse; a cache does not need durability. */
    bool ok = write_all(fd, header, sizeof header) && (n == 0 || write_all(fd, payload, n));
    int err = ok ? 0 : errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        err = errno;
    }
    gr_status st = GR_OK;
    if (!ok) {
        unlink(tmp);
        st = gr_error(GR_ERR_IO, "cannot write cache file '%s': %s", path, err ? strerror(err) : "short write");
    }
    gr_strfree(tmp);
    return st;
}

/* ==== read ======================================================================================== */

static size_t read_full(int fd, void *buf, size_t n) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

static gr_status read_entry(int fd, const char *path, uint32_t kind, uint64_t key, size_t max_payload, void **out,
                            size_t *out_n) {
    struct stat sbuf;
    if (fstat(fd, &sbuf) != 0) return gr_error(GR_ERR_IO, "cannot read cache file '%s': %s", path, strerror(errno));
    if (!S_ISREG(sbuf.st_mode)) return gr_error(GR_ERR_IO, "cache file '%s' is not a regular file", path);
    uint64_t size = (uint64_t)sbuf.st_size;
    if (size < GR_CACHE_FILE_HEADER_BYTES)
        return gr_error(GR_ERR_IO, "cache file '%s' is truncated (%llu bytes, shorter than its %u-byte header)", path,
                        (unsigned long long)size, GR_CACHE_FILE_HEADER_BYTES);
    if (size - GR_CACHE_FILE_HEADER_BYTES > (uint64_t)max_payload)
        return gr_error(GR_ERR_IO, "cache file '%s' is too large (%llu bytes; limit %zu)", path, (unsigned long long)size,
                        max_payload + GR_CACHE_FILE_HEADER_BYTES);
    unsigned char header[GR_CACHE_FILE_HEADER_BYTES];
    if (read_full(fd, header, sizeof header) != sizeof header)
        return gr_error(GR_ERR_IO, "cache file '%s' is truncated (short read of its header)", path);
    if (memcmp(header, cache_magic, sizeof cache_magic) != 0)
        return gr_error(GR_ERR_IO, "cache file '%s' has a wrong magic (not a graft cache file)", path);
    uint32_t version = gr_le_get_u32(header + 8);
    if (version != GR_CACHE_FILE_VERSION)
        return gr_error(GR_ERR_IO, "cache file '%s' has format version %u (this graft reads %u)", path, version,
                        GR_CACHE_FILE_VERSION);
    uint64_t len = gr_le_get_u64(header + 24);
    if (len != size - GR_CACHE_FILE_HEADER_BYTES)
        return gr_error(GR_ERR_IO, "cache file '%s' is truncated or padded (header says %llu payload bytes, file holds %llu)",
                        path, (unsigned long long)len, (unsigned long long)(size - GR_CACHE_FILE_HEADER_BYTES));
    size_t n = (size_t)len; /* <= max_payload: checked against the file size above */
    unsigned char *buf = gr_malloc(n ? n : 1);
    if (!buf) return GR_ERR_NOMEM;
    size_t got = read_full(fd, buf, n);
    if (got != n) {
        gr_free(buf, n ? n : 1);
        return gr_error(GR_ERR_IO, "cache file '%s' is truncated (read %zu of %zu payload bytes)", path, got, n);
    }
    if (gr_le_get_u64(header + 32) != entry_checksum(header, buf, n)) {
        gr_free(buf, n ? n : 1);
        return gr_error(GR_ERR_IO, "cache file '%s' fails its checksum (corrupt)", path);
    }
    if (gr_le_get_u32(header + 12) != kind || gr_le_get_u64(header + 16) != key) {
        gr_free(buf, n ? n : 1);
        return gr_error(GR_ERR_IO, "cache file '%s' holds another entry (kind %08x key %016llx; wanted kind %08x key %016llx)",
                        path, gr_le_get_u32(header + 12), (unsigned long long)gr_le_get_u64(header + 16), kind,
                        (unsigned long long)key);
    }
    *out = buf;
    *out_n = n;
    return GR_OK;
}

gr_status gr_cache_file_read(const char *path, uint32_t kind, uint64_t key, size_t max_payload, void **out,
                             size_t *out_n) {
    *out = NULL;
    *out_n = 0;
    /* O_NONBLOCK: opening a FIFO planted at the path must not wait for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return gr_error(GR_ERR_NOT_FOUND, "no cache file '%s'", path);
        return gr_error(GR_ERR_IO, "cannot open cache file '%s': %s", path, strerror(errno));
    }
    gr_status st = read_entry(fd, path, kind, key, max_payload, out, out_n);
    close(fd);
    return st;
}

void gr_cache_file_free(void *payload, size_t n) { gr_free(payload, n ? n : 1); }
