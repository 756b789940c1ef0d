/* util/cache-file — small files that other processes may read and write at the
 * same time (the CUDA kernel cache, persisted decisions).
 *
 * A writer never exposes a half-written file: it writes a unique temporary
 * file in the same directory and rename(2)s it over the entry, which replaces
 * it atomically. A reader never trusts what it finds: every entry carries a
 * header (magic, format version, the caller's kind and key, payload length,
 * checksum) and is refused when any of them disagrees, when it is not a
 * regular file, or when it is larger than the caller's bound. A refused entry
 * is a cache miss; the caller warns and writes it again.
 *
 * Layout (little-endian):
 *   0  char[8]  magic "graftCF\n"
 *   8  u32      GR_CACHE_FILE_VERSION (this layout)
 *  12  u32      kind: the caller's tag for what the payload is (and its version)
 *  16  u64      key: the caller's full key (a second check beside the file name)
 *  24  u64      payload length in bytes
 *  32  u64      checksum: FNV-1a 64 of bytes 0..31, then of the payload
 *  40  payload
 */
#ifndef GR_UTIL_CACHE_FILE_H
#define GR_UTIL_CACHE_FILE_H

#include "util/util.h"

#define GR_CACHE_FILE_VERSION 1u
#define GR_CACHE_FILE_HEADER_BYTES 40u

/* Writes `payload` as the entry at `path`, creating missing parent
 * directories. Atomic with respect to concurrent readers and writers of the
 * same path in any process: a reader sees the old entry, the new one, or none.
 * GR_ERR_IO naming the file when the directory cannot be made or written. */
gr_status gr_cache_file_write(const char *path, uint32_t kind, uint64_t key, const void *payload, size_t n);

/* Reads the entry at `path` into a gr_malloc'ed buffer (free with
 * gr_cache_file_free(*out, *out_n)). GR_ERR_NOT_FOUND (with a message) when there is no entry; GR_ERR_IO with a
 * message naming the file and what is wrong when the entry is unreadable, not
 * a regular file, over `max_payload` bytes, truncated, of another kind or key,
 * or fails its checksum. Never blocks on a FIFO, never reads past the bound. */
gr_status gr_cache_file_read(const char *path, uint32_t kind, uint64_t key, size_t max_payload, void **out,
                             size_t *out_n);
void gr_cache_file_free(void *payload, size_t n);

/* mkdir -p; GR_ERR_IO naming the component that could not be made. */
gr_status gr_mkdir_p(const char *path);

/* Little-endian fields of the files' payloads (one byte order whatever the host's). */
static inline void gr_le_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void gr_le_put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t gr_le_get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t gr_le_get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
