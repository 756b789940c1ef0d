/* test_util — util's file readers and message escaping (issue 17, hostile input):
 * every file graft reads is opened as a regular file only (a FIFO cannot block the
 * open, /dev/zero cannot feed an endless read), reads are bounded by the measured
 * size, and every error message has the control characters of model-provided
 * names escaped so they cannot drive a terminal. */
#include "check.h"
#include "util/util.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void tmp_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmpdir, name); }

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/* A failed check here would otherwise hang the test: a reader that blocks on a FIFO. */
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_util: timed out: a read blocked (FIFO?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* ==== escaping ==================================================================================== */
static bool esc_is(const char *src, bool multiline, const char *want) {
    char buf[256];
    size_t n = gr_escape_text(buf, sizeof buf, src, multiline);
    bool ok = !strcmp(buf, want) && n == strlen(want);
    if (!ok) fprintf(stderr, "escape(\"%s\") gave \"%s\" (%zu), want \"%s\"\n", src, buf, n, want);
    return ok;
}

static void test_escape(void) {
    CHECK(esc_is("plain name", true, "plain name"));
    CHECK(esc_is("a\x1b[31mred", true, "a\\x1b[31mred"));           /* CSI colour */
    CHECK(esc_is("t\x1b]0;title\x07", true, "t\\x1b]0;title\\x07")); /* OSC window title */
    CHECK(esc_is("two\nlines\tand tab", true, "two\nlines\tand tab"));
    CHECK(esc_is("two\nlines\tand tab", false, "two\\x0alines\\x09and tab"));
    CHECK(esc_is("cr\rdel\x7f", true, "cr\\x0ddel\\x7f"));
    CHECK(esc_is("quote\" and \\ stay", true, "quote\" and \\ stay"));
    /* valid UTF-8 passes; C1 controls (U+009B is an 8-bit CSI) and malformed bytes do not */
    CHECK(esc_is("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", true, "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"));
    CHECK(esc_is("c1\xc2\x9b" "31m", true, "c1\\xc2\\x9b31m"));
    CHECK(esc_is("nbsp\xc2\xa0ok", true, "nbsp\xc2\xa0ok"));
    CHECK(esc_is("bad\xff\x80", true, "bad\\xff\\x80"));
    CHECK(esc_is("overlong\xc0\xaf", true, "overlong\\xc0\\xaf"));
    CHECK(esc_is("surrogate\xed\xa0\x80", true, "surrogate\\xed\\xa0\\x80"));
    CHECK(esc_is("cut\xe4\xb8", true, "cut\\xe4\\xb8"));
    CHECK(esc_is("big\xf4\x90\x80\x80", true, "big\\xf4\\x90\\x80\\x80"));
    /* escaping escaped text changes nothing */
    char once[256], twice[256];
    gr_escape_text(once, sizeof once, "x\x1b\x9b\xc2\x85y\n", false);
    gr_escape_text(twice, sizeof twice, once, false);
    CHECK(!strcmp(once, twice));
    /* truncation: the length needed comes back; no escape or character is cut in half */
    char small[8];
    CHECK(gr_escape_text(small, sizeof small, "ab\x1b\x1b", true) == 10);
    CHECK(!strcmp(small, "ab\\x1b"));
    CHECK(gr_escape_text(small, sizeof small, "abcde\xc3\xa9", true) == 7 && !strcmp(small, "abcde\xc3\xa9"));
    CHECK(gr_escape_text(small, sizeof small, "abcdef\xc3\xa9", true) == 8 && !strcmp(small, "abcdef"));
    CHECK(gr_escape_text(NULL, 0, "\x1b", true) == 4);
    CHECK(gr_utf8_seq_len("a") == 1 && gr_utf8_seq_len("\xc3\xa9") == 2 && gr_utf8_seq_len("\xe4\xb8\xad") == 3 &&
          gr_utf8_seq_len("\xf0\x9f\x98\x80") == 4 && gr_utf8_seq_len("\xc3") == 0 && gr_utf8_seq_len("") == 0);
}

static void test_error_messages_escaped(void) {
    CHECK(gr_error(GR_ERR_INVALID, "node '%s': bad", "n\x1b[2J\x1b[H") == GR_ERR_INVALID);
    CHECK(!strchr(gr_last_error(), 0x1b));
    CHECK(!strcmp(gr_last_error(), "node 'n\\x1b[2J\\x1b[H': bad"));
    /* multi-line messages (compiler logs) keep their lines */
    gr_error(GR_ERR_DEVICE, "log:\nline 1\n\tline 2");
    CHECK(!strcmp(gr_last_error(), "log:\nline 1\n\tline 2"));
    /* the prefix is escaped too, the old message stays as it was */
    gr_error(GR_ERR_SHAPE, "value '%s'", "v\x07");
    gr_error_prefix(GR_ERR_SHAPE, "while loading '%s'", "m\x1b.onnx");
    CHECK(!strcmp(gr_last_error(), "while loading 'm\\x1b.onnx': value 'v\\x07'"));
    /* a message may quote the last one */
    gr_error(GR_ERR_IO, "inner \x1b");
    gr_error(GR_ERR_IO, "outer: %s", gr_last_error());
    CHECK(!strcmp(gr_last_error(), "outer: inner \\x1b"));
    /* a long name: the message is cut between characters, never inside an escape */
    char name[6000];
    memset(name, 0x1b, sizeof name - 1);
    name[sizeof name - 1] = 0;
    gr_error(GR_ERR_INVALID, "x%s", name);
    size_t len = strlen(gr_last_error());
    CHECK(len > 4000 && len < 4096 && (len - 1) % 4 == 0);
    gr_error_prefix(GR_ERR_INVALID, "p");
    len = strlen(gr_last_error());
    CHECK(len < 4096 && !strncmp(gr_last_error(), "p: x\\x1b", 8) && (len - 4) % 4 == 0);
    gr_error_clear();
}

/* ==== files ======================================================================================= */
static void test_open_regular(void) {
    char path[512], fifo[512], dir[512];
    tmp_path(path, sizeof path, "data.bin");
    write_bytes(path, "0123456789", 10);
    int fd;
    uint64_t size;
    CHECK_OK(gr_open_regular(path, &fd, &size));
    CHECK(size == 10);
    char buf[16] = {0};
    CHECK_OK(gr_read_at(fd, path, buf, 4, 3));
    CHECK(!memcmp(buf, "3456", 4));
    CHECK_ERR(gr_read_at(fd, path, buf, 8, 5), GR_ERR_IO, "short read (5 of 8 bytes");
    CHECK(strstr(gr_last_error(), "data.bin") != NULL);
    close(fd);

    tmp_path(fifo, sizeof fifo, "pipe");
    CHECK(mkfifo(fifo, 0600) == 0);
    /* no writer: a blocking open would wait forever (the alarm ends the test then) */
    CHECK_ERR(gr_open_regular(fifo, &fd, &size), GR_ERR_IO, "FIFO");
    CHECK(fd == -1 && strstr(gr_last_error(), "pipe") != NULL);
    char *text = NULL;
    size_t n = 0;
    CHECK_ERR(gr_read_file(fifo, &text, &n), GR_ERR_IO, "FIFO");
    CHECK(text == NULL);
    CHECK_ERR(gr_read_file("/dev/zero", &text, &n), GR_ERR_IO, "character device");
    tmp_path(dir, sizeof dir, "sub");
    CHECK(mkdir(dir, 0700) == 0);
    CHECK_ERR(gr_read_file(dir, &text, &n), GR_ERR_IO, "a directory");
    tmp_path(path, sizeof path, "absent");
    CHECK_ERR(gr_read_file(path, &text, &n), GR_ERR_IO, "No such file");
    CHECK(text == NULL && n == 0);
    /* a symbolic link is followed to what it names, and that is judged */
    char link[512];
    tmp_path(link, sizeof link, "zero-link");
    CHECK(symlink("/dev/zero", link) == 0);
    CHECK_ERR(gr_read_file(link, &text, &n), GR_ERR_IO, "character device");

    /* gr_read_file reads what fstat measured */
    tmp_path(path, sizeof path, "text.txt");
    write_bytes(path, "hello", 5);
    CHECK_OK(gr_read_file(path, &text, &n));
    CHECK(text && n == 5 && !strcmp(text, "hello"));
    if (text) gr_free(text, n + 1);
}

/* the allocation of gr_read_file fails cleanly */
static void test_read_file_alloc_failure(void) {
    char path[512];
    tmp_path(path, sizeof path, "text.txt");
    long live = gr_debug_live_allocs();
    char *text = NULL;
    size_t n = 0;
    gr_debug_fail_alloc_after(1);
    CHECK_ERR(gr_read_file(path, &text, &n), GR_ERR_NOMEM, "out of host memory");
    gr_debug_fail_alloc_after(0);
    CHECK(text == NULL && gr_debug_live_allocs() == live);
}

static void cleanup(void) {
    static const char *names[] = {"data.bin", "pipe", "sub", "absent", "zero-link", "text.txt"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tmp_path(path, sizeof path, names[i]);
        if (unlink(path) != 0) rmdir(path);
    }
    rmdir(tmpdir);
}

/* gr_name_copy: the snprintf("%s%d") it replaces on hot paths, truncation included */
static void test_name_copy(void) {
    char b[8], full[64], ref[8];
    const char *srcs[] = {"", "x", "y", "kernel", "averylongname"};
    long long ns[] = {-1, 0, 7, 31, 1234567, 9223372036854775807LL};
    for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            memset(b, 'Z', sizeof b);
            gr_name_copy(b, sizeof b, srcs[i], ns[j]);
            if (ns[j] < 0) snprintf(full, sizeof full, "%s", srcs[i]);
            else snprintf(full, sizeof full, "%s%lld", srcs[i], ns[j]);
            memcpy(ref, full, sizeof ref - 1); /* what snprintf into 8 bytes keeps */
            ref[sizeof ref - 1] = 0;
            CHECK_MSG(strcmp(b, ref) == 0, "gr_name_copy('%s', %lld) = '%s', snprintf '%s'", srcs[i], ns[j], b, ref);
        }
    char one[1] = {'Z'};
    gr_name_copy(one, 1, "abc", 5);
    CHECK(one[0] == 0);
    gr_name_copy(b, sizeof b, NULL, 42);
    CHECK(strcmp(b, "42") == 0);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(60);
    snprintf(tmpdir, sizeof tmpdir, "%s/graft-test-util-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_escape();
    test_error_messages_escaped();
    test_open_regular();
    test_read_file_alloc_failure();
    test_name_copy();
    cleanup();
    return check_summary("test_util");
}
