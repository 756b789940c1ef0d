/* test_cachefile — util/cache-file and the CUDA kernel cache built on it
 * (device/cuda/cuda-cache.c, which needs no CUDA): round trips, every kind of
 * bad entry (truncated, flipped bit, wrong magic / version / length / kind /
 * key, too large, not a regular file), missing and unwritable directories,
 * allocation failures, and writers in several processes and threads racing on
 * one entry while readers check they only ever see complete entries. */
#include "check.h"
#include "device/cuda/cuda-cache.h"
#include "util/cache-file.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIND 0x74736574u /* "test" */
#define KEY 0x1234567890abcdefull
#define MAX_PAYLOAD ((size_t)1 << 20)

static char tmpdir[64];

static char *path_in(const char *name) { return gr_sprintf("%s/%s", tmpdir, name); }

/* ==== helpers ====================================================================================== */

static unsigned char *file_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)size + 1);
    *n = fread(buf, 1, (size_t)size, f);
    fclose(f);
    return buf;
}

static void put_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A payload that carries its own description: 8 bytes of seed, then bytes
 * derived from it, with a length derived from it too. A torn or mixed entry
 * cannot pass verify(). */
static size_t payload_len(uint64_t seed) { return 8 + (size_t)(seed * 2654435761u % 65536u); }

static unsigned char *make_payload(uint64_t seed, size_t *n) {
    *n = payload_len(seed);
    unsigned char *p = malloc(*n);
    memcpy(p, &seed, 8);
    uint32_t x = (uint32_t)seed ^ (uint32_t)(seed >> 32) ^ 0x9e3779b9u;
    for (size_t i = 8; i < *n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
    return p;
}

static bool verify_payload(const unsigned char *p, size_t n) {
    if (n < 8) return false;
    uint64_t seed;
    memcpy(&seed, p, 8);
    size_t want_n;
    unsigned char *want = make_payload(seed, &want_n);
    bool ok = want_n == n && !memcmp(want, p, n);
    free(want);
    return ok;
}

/* Runs fn with stderr captured; returns what it wrote (free()). */
static char *capture_stderr(void (*fn)(void *), void *arg) {
    char *log = path_in("stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t n = 0;
    unsigned char *text = file_bytes(log, &n);
    if (text) text[n] = 0;
    unlink(log);
    gr_strfree(log);
    return (char *)text;
}

static int count_entries(const char *dir, const char *contains) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, contains)) n++;
    closedir(d);
    return n;
}

/* ==== round trips ======================================================================================= */

static void test_round_trip(void) {
    char *path = path_in("rt/sub/entry.bin"); /* parent directories do not exist yet */
    void *got = NULL;
    size_t got_n = 0;
    CHECK_ERR(gr_cache_file_read(path, KIND, KEY, MAX_PAYLOAD, &got, &got_n), GR_ERR_NOT_FOUND, "rt/sub/entry.bin");
    const size_t sizes[] = {0, 1, 39, 40, 4096, 65543, MAX_PAYLOAD};
    for (int i = 0; i < GR_ARRAY_LEN(sizes); i++) {
        unsigned char *data = malloc(sizes[i] ? sizes[i] : 1);
        for (size_t j = 0; j < sizes[i]; j++) data[j] = (unsigned char)(j * 7 + (size_t)i);
        CHECK_OK(gr_cache_file_write(path, KIND, KEY, data, sizes[i]));
        gr_status st = gr_cache_file_read(path, KIND, KEY, MAX_PAYLOAD, &got, &got_n);
        CHECK_MSG(st == GR_OK && got_n == sizes[i] && (sizes[i] == 0 || !memcmp(got, data, sizes[i])),
                  "size %zu: %s", sizes[i], gr_last_error());
        if (st == GR_OK) gr_cache_file_free(got, got_n);
        struct stat sb;
        CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == GR_CACHE_FILE_HEADER_BYTES + sizes[i]);
        free(data);
    }
    char *dir = path_in("rt/sub");
    CHECK_MSG(count_entries(dir, ".tmp") == 0, "temporary files left behind in %s", dir);
    CHECK(count_entries(dir, "entry.bin") == 1);
    gr_strfree(dir);
    gr_strfree(path);
}

/* ==== bad entries ======================================================================================== */

static char *bad_path;
static unsigned char *good;
static size_t good_n;

static void write_good(void) {
    unsigned char data[64];
    for (int i = 0; i < 64; i++) data[i] = (unsigned char)(i * 13 + 5);
    CHECK_OK(gr_cache_file_write(bad_path, KIND, KEY, data, sizeof data));
    free(good);
    good = file_bytes(bad_path, &good_n);
}

/* The entry at bad_path must be refused with GR_ERR_IO and a message naming it and `needle`. */
static void expect_refused(const char *needle, const char *what) {
    void *got = (void *)1;
    size_t got_n = 7;
    long live = gr_debug_live_allocs();
    gr_status st = gr_cache_file_read(bad_path, KIND, KEY, MAX_PAYLOAD, &got, &got_n);
    CHECK_MSG(st == GR_ERR_IO && strstr(gr_last_error(), needle) && strstr(gr_last_error(), bad_path),
              "%s: expected an i/o error naming the file and \"%s\", got %s: %s", what, needle, gr_status_name(st),
              gr_last_error());
    CHECK_MSG(got == NULL && got_n == 0, "%s: output not cleared", what);
    CHECK_MSG(gr_debug_live_allocs() == live, "%s: leaked", what);
    if (st == GR_OK) gr_cache_file_free(got, got_n);
}

static void test_bad_entries(void) {
    bad_path = path_in("bad.entry");
    write_good();
    if (!good) return;
    CHECK(good_n == GR_CACHE_FILE_HEADER_BYTES + 64);

    /* truncated anywhere: empty, inside the header, right after it, inside the payload */
    const size_t cuts[] = {0, 1, 8, 39, 40, 41, 70, good_n - 1};
    for (int i = 0; i < GR_ARRAY_LEN(cuts); i++) {
        put_bytes(bad_path, good, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
        expect_refused("truncated", what);
    }
    /* one flipped bit anywhere in the file */
    for (size_t i = 0; i < good_n; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            good[i] ^= (unsigned char)(1u << bit);
            put_bytes(bad_path, good, good_n);
            good[i] ^= (unsigned char)(1u << bit);
            void *got = NULL;
            size_t got_n = 0;
            gr_status st = gr_cache_file_read(bad_path, KIND, KEY, MAX_PAYLOAD, &got, &got_n);
            CHECK_MSG(st == GR_ERR_IO && strstr(gr_last_error(), bad_path), "bit %d of byte %zu flipped: got %s", bit, i,
                      gr_status_name(st));
            if (st == GR_OK) gr_cache_file_free(got, got_n);
        }
    }
    /* what the flips of each field report */
    good[GR_CACHE_FILE_HEADER_BYTES + 3] ^= 0x10;
    put_bytes(bad_path, good, good_n);
    expect_refused("checksum", "flipped payload byte");
    good[GR_CACHE_FILE_HEADER_BYTES + 3] ^= 0x10;
    good[17] ^= 0x01; /* the key */
    put_bytes(bad_path, good, good_n);
    expect_refused("checksum", "flipped key byte");
    good[17] ^= 0x01;

    /* wrong magic: an old raw cubin (an ELF file) at the entry's name */
    unsigned char elf[200] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    put_bytes(bad_path, elf, sizeof elf);
    expect_refused("wrong magic", "raw ELF");
    /* wrong format version */
    good[8] = 2;
    put_bytes(bad_path, good, good_n);
    expect_refused("format version 2", "version 2");
    good[8] = 1;
    /* wrong length: header says more than the file holds, and less */
    good[24] = 65;
    put_bytes(bad_path, good, good_n);
    expect_refused("header says 65 payload bytes, file holds 64", "length 65");
    good[24] = 63;
    put_bytes(bad_path, good, good_n);
    expect_refused("header says 63", "length 63");
    good[24] = 64;
    /* padded: bytes appended after a valid entry */
    unsigned char *padded = malloc(good_n + 5);
    memcpy(padded, good, good_n);
    memset(padded + good_n, 0, 5);
    put_bytes(bad_path, padded, good_n + 5);
    free(padded);
    expect_refused("file holds 69", "padded");

    /* valid entry, but of another kind or for another key */
    put_bytes(bad_path, good, good_n);
    void *got = NULL;
    size_t got_n = 0;
    CHECK_OK(gr_cache_file_read(bad_path, KIND, KEY, MAX_PAYLOAD, &got, &got_n));
    if (got) gr_cache_file_free(got, got_n);
    CHECK_ERR(gr_cache_file_read(bad_path, KIND + 1, KEY, MAX_PAYLOAD, &got, &got_n), GR_ERR_IO, "another entry");
    CHECK_ERR(gr_cache_file_read(bad_path, KIND, KEY ^ 1, MAX_PAYLOAD, &got, &got_n), GR_ERR_IO, "another entry");
    /* over the caller's bound: refused from its size, before any read */
    CHECK_ERR(gr_cache_file_read(bad_path, KIND, KEY, 63, &got, &got_n), GR_ERR_IO, "too large");
    CHECK_OK(gr_cache_file_read(bad_path, KIND, KEY, 64, &got, &got_n));
    if (got) gr_cache_file_free(got, got_n);
    unlink(bad_path);
    int fd = open(bad_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 34) == 0); /* sparse 16 GiB */
    if (fd >= 0) close(fd);
    expect_refused("too large", "16 GiB file");

    /* not a regular file: a directory, a FIFO (opening it must not block) */
    unlink(bad_path);
    CHECK(mkdir(bad_path, 0755) == 0);
    expect_refused("not a regular file", "directory");
    rmdir(bad_path);
    CHECK(mkfifo(bad_path, 0644) == 0);
    expect_refused("not a regular file", "fifo");
    unlink(bad_path);

    /* a refused entry is rewritten and reads back */
    put_bytes(bad_path, elf, sizeof elf);
    write_good();
    CHECK_OK(gr_cache_file_read(bad_path, KIND, KEY, MAX_PAYLOAD, &got, &got_n));
    if (got) gr_cache_file_free(got, got_n);

    free(good);
    good = NULL;
    gr_strfree(bad_path);
}

/* ==== directories ============================================================================================ */

static void test_directories(void) {
    void *got = NULL;
    size_t got_n = 0;
    char *missing = path_in("no/such/dir/entry");
    CHECK_ERR(gr_cache_file_read(missing, KIND, KEY, MAX_PAYLOAD, &got, &got_n), GR_ERR_NOT_FOUND, missing);
    gr_strfree(missing);

    /* a file where a directory should be: works for root too (chmod would not stop root) */
    char *blocker = path_in("blocker");
    put_bytes(blocker, "x", 1);
    char *under = path_in("blocker/kernels/entry");
    CHECK_ERR(gr_cache_file_write(under, KIND, KEY, "abc", 3), GR_ERR_IO, under);
    CHECK(strstr(gr_last_error(), "blocker") != NULL);
    CHECK_ERR(gr_cache_file_read(under, KIND, KEY, MAX_PAYLOAD, &got, &got_n), GR_ERR_NOT_FOUND, under);
    CHECK_ERR(gr_mkdir_p(blocker), GR_ERR_IO, "in the way");
    gr_strfree(under);
    gr_strfree(blocker);

    /* a read-only directory (only meaningful when not root) */
    char *ro = path_in("readonly");
    CHECK_OK(gr_mkdir_p(ro));
    CHECK_OK(gr_mkdir_p(ro)); /* exists already: fine */
    if (geteuid() != 0) {
        chmod(ro, 0555);
        char *entry = path_in("readonly/entry");
        CHECK_ERR(gr_cache_file_write(entry, KIND, KEY, "abc", 3), GR_ERR_IO, entry);
        CHECK(count_entries(ro, ".tmp") == 0);
        gr_strfree(entry);
        chmod(ro, 0755);
    }
    gr_strfree(ro);
    CHECK_ERR(gr_mkdir_p(""), GR_ERR_INVALID, "empty");
}

/* ==== allocation failures ======================================================================================= */

static void test_alloc_failures(void) {
    char *path = path_in("oom/entry");
    unsigned char data[100];
    memset(data, 3, sizeof data);
    long base = gr_debug_live_allocs();
    int write_fail_points = 0, read_fail_points = 0;
    for (long n = 1; n < 50; n++) {
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_cache_file_write(path, KIND, KEY, data, sizeof data);
        gr_debug_fail_alloc_after(0);
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "write, allocation %ld fails: %s", n, gr_status_name(st));
        CHECK_MSG(gr_debug_live_allocs() == base, "write, allocation %ld fails: leaked", n);
        if (st == GR_OK) break;
        write_fail_points++;
    }
    for (long n = 1; n < 50; n++) {
        void *got = NULL;
        size_t got_n = 0;
        gr_debug_fail_alloc_after(n);
        gr_status st = gr_cache_file_read(path, KIND, KEY, MAX_PAYLOAD, &got, &got_n);
        gr_debug_fail_alloc_after(0);
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "read, allocation %ld fails: %s", n, gr_status_name(st));
        if (st == GR_OK) {
            CHECK(got_n == sizeof data && !memcmp(got, data, sizeof data));
            gr_cache_file_free(got, got_n);
        }
        CHECK_MSG(gr_debug_live_allocs() == base, "read, allocation %ld fails: leaked", n);
        if (st == GR_OK) break;
        read_fail_points++;
    }
    CHECK(write_fail_points >= 2 && read_fail_points >= 1); /* the injection reached them */
    char *dir = path_in("oom");
    CHECK(count_entries(dir, ".tmp") == 0);
    gr_strfree(dir);
    gr_strfree(path);
}

/* ==== concurrent writers and readers ====================================================================== */

enum { RACE_WRITES = 150 };

static int race_write(const char *path, uint64_t id) {
    for (int i = 0; i < RACE_WRITES; i++) {
        size_t n;
        unsigned char *p = make_payload((id << 32) | (uint64_t)i, &n);
        gr_status st = gr_cache_file_write(path, KIND, KEY, p, n);
        free(p);
        if (st != GR_OK) {
            fprintf(stderr, "writer %llu: %s\n", (unsigned long long)id, gr_last_error());
            return 1;
        }
    }
    return 0;
}

/* Reads until `done` exists; every read must give a complete, valid entry.
 * Returns 0, or 1 for a bad read, or 2 when nothing was read. */
static int race_read(const char *path, const char *done, long *reads_out) {
    long reads = 0;
    for (;;) {
        bool last = access(done, F_OK) == 0; /* one more read after the writers finished */
        void *got = NULL;
        size_t got_n = 0;
        gr_status st = gr_cache_file_read(path, KIND, KEY, MAX_PAYLOAD, &got, &got_n);
        if (st != GR_OK || !verify_payload(got, got_n)) {
            fprintf(stderr, "reader saw a bad entry: %s: %s\n", gr_status_name(st),
                    st == GR_OK ? "payload does not verify" : gr_last_error());
            if (st == GR_OK) gr_cache_file_free(got, got_n);
            return 1;
        }
        gr_cache_file_free(got, got_n);
        reads++;
        if (last) break;
    }
    if (reads_out) *reads_out = reads;
    return reads > 0 ? 0 : 2;
}

static void test_processes_race(void) {
    char *path = path_in("race/shared.entry");
    char *done = path_in("race/done");
    CHECK(race_write(path, 99) == 0); /* the entry exists before readers start: a miss is a failure too */
    enum { WRITERS = 3, READERS = 2 };
    pid_t pids[WRITERS + READERS];
    for (int i = 0; i < WRITERS + READERS; i++) {
        fflush(NULL); /* nothing buffered twice */
        pids[i] = fork();
        if (pids[i] == 0) _exit(i < WRITERS ? race_write(path, (uint64_t)i) : race_read(path, done, NULL));
        CHECK(pids[i] > 0);
    }
    for (int i = 0; i < WRITERS + READERS; i++) {
        if (i == WRITERS) put_bytes(done, "", 0); /* writers are finished */
        int status = 0;
        if (pids[i] <= 0 || waitpid(pids[i], &status, 0) != pids[i]) continue;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        CHECK_MSG(ok, "%s process %d exited with status %d", i < WRITERS ? "writer" : "reader", i,
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    char *dir = path_in("race");
    CHECK_MSG(count_entries(dir, ".tmp") == 0, "temporary files left behind");
    CHECK(count_entries(dir, "shared.entry") == 1);
    gr_strfree(dir);
    gr_strfree(done);
    gr_strfree(path);
}

/* Threads of one process share a pid: their temporary names must still differ. */
typedef struct {
    const char *path, *done;
    uint64_t id;
    int result;
    long reads;
} race_arg;

static void *thread_writer(void *p) {
    race_arg *a = p;
    a->result = race_write(a->path, a->id);
    return NULL;
}
static void *thread_reader(void *p) {
    race_arg *a = p;
    a->result = race_read(a->path, a->done, &a->reads);
    return NULL;
}

static void test_threads_race(void) {
    char *path = path_in("trace/shared.entry");
    char *done = path_in("trace/done");
    CHECK(race_write(path, 77) == 0);
    race_arg args[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (race_arg){.path = path, .done = done, .id = (uint64_t)i};
        pthread_create(&t[i], NULL, i < 2 ? thread_writer : thread_reader, &args[i]);
    }
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    put_bytes(done, "", 0);
    pthread_join(t[2], NULL);
    pthread_join(t[3], NULL);
    for (int i = 0; i < 4; i++) CHECK_MSG(args[i].result == 0, "thread %d: result %d", i, args[i].result);
    char *dir = path_in("trace");
    CHECK(count_entries(dir, ".tmp") == 0);
    gr_strfree(dir);
    gr_strfree(done);
    gr_strfree(path);
}

/* ==== the CUDA kernel cache ========================================================================================= */

static const char *kernel_src = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n";
static gr_cuda_cache kc;
static unsigned char cubin[300];
static bool load_hit;

static void cuda_load(void *arg) {
    (void)arg;
    void *got = NULL;
    size_t n = 0;
    load_hit = gr_cuda_cache_load(&kc, kernel_src, &got, &n);
    if (load_hit) {
        CHECK(n == sizeof cubin && !memcmp(got, cubin, n));
        gr_cuda_cache_free(got, n);
    }
}
static void cuda_store(void *arg) {
    (void)arg;
    gr_cuda_cache_store(&kc, kernel_src, cubin, sizeof cubin);
}

static void test_cuda_cache(void) {
    char *dir = path_in("cuda");
    kc = (gr_cuda_cache){.dir = dir, .arch = 90, .nvrtc_major = 13, .nvrtc_minor = 0, .options = "--std=c++17"};
    for (size_t i = 0; i < sizeof cubin; i++) cubin[i] = (unsigned char)(i * 31);
    memcpy(cubin, "\x7f" "ELF", 4);

    /* the key covers source, options, architecture and NVRTC version */
    uint64_t key = gr_cuda_cache_key(&kc, kernel_src);
    gr_cuda_cache other = kc;
    other.arch = 89;
    CHECK(gr_cuda_cache_key(&other, kernel_src) != key);
    other = kc;
    other.nvrtc_minor = 1;
    CHECK(gr_cuda_cache_key(&other, kernel_src) != key);
    other = kc;
    other.options = "--std=c++17 -lineinfo";
    CHECK(gr_cuda_cache_key(&other, kernel_src) != key);
    CHECK(gr_cuda_cache_key(&kc, "extern \"C\" __global__ void k2() {}") != key);
    char *path = gr_cuda_cache_path(&kc, kernel_src);
    CHECK(path && strstr(path, "/kernels/sm90-"));

    /* a miss is silent, a store then hits */
    char *log = capture_stderr(cuda_load, NULL);
    CHECK(!load_hit && log && log[0] == 0);
    free(log);
    log = capture_stderr(cuda_store, NULL);
    CHECK(log && log[0] == 0);
    free(log);
    cuda_load(NULL);
    CHECK(load_hit);

    /* an entry of another build of the toolkit is a (silent) miss: its name differs */
    other = kc;
    other.nvrtc_minor = 1;
    void *got = NULL;
    size_t n = 0;
    CHECK(!gr_cuda_cache_load(&other, kernel_src, &got, &n));

    /* a corrupt entry: a warning naming the file, a miss, and a store repairs it */
    size_t size = 0;
    unsigned char *bytes = path ? file_bytes(path, &size) : NULL;
    if (bytes) {
        bytes[size / 2] ^= 0x40;
        put_bytes(path, bytes, size);
        free(bytes);
    }
    log = capture_stderr(cuda_load, NULL);
    CHECK_MSG(!load_hit && log && strstr(log, "warning") && strstr(log, path) && strstr(log, "checksum"),
              "stderr: %s", log ? log : "(none)");
    free(log);
    cuda_store(NULL);
    cuda_load(NULL);
    CHECK(load_hit);
    /* a raw cubin from before the cache had headers: refused with a warning, then replaced */
    put_bytes(path, cubin, sizeof cubin);
    log = capture_stderr(cuda_load, NULL);
    CHECK(!load_hit && log && strstr(log, "wrong magic") && strstr(log, path));
    free(log);

    /* no directory configured: no cache, no noise */
    gr_cuda_cache none = kc;
    none.dir = NULL;
    CHECK(!gr_cuda_cache_load(&none, kernel_src, &got, &n));
    gr_cuda_cache_store(&none, kernel_src, cubin, sizeof cubin);
    CHECK(gr_last_error()[0] == 0);

    /* an unwritable cache: the store warns (once per process) and the caller goes on */
    char *blocked = path_in("blocker-cuda");
    put_bytes(blocked, "x", 1);
    kc.dir = blocked;
    log = capture_stderr(cuda_store, NULL);
    CHECK_MSG(log && strstr(log, "warning") && strstr(log, blocked), "stderr: %s", log ? log : "(none)");
    free(log);
    log = capture_stderr(cuda_store, NULL);
    CHECK(log && log[0] == 0);
    free(log);
    CHECK(gr_last_error()[0] == 0);
    gr_strfree(blocked);
    gr_strfree(path);
    gr_strfree(dir);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/graft-cachefile-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    long base = gr_debug_live_allocs();
    test_round_trip();
    test_bad_entries();
    test_directories();
    test_alloc_failures();
    test_processes_race();
    test_threads_race();
    test_cuda_cache();
    CHECK_MSG(gr_debug_live_allocs() == base, "%ld allocations leaked", gr_debug_live_allocs() - base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary("test_cachefile");
}
