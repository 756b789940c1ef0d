/* Corpus replay without libFuzzer: feeds every file named on the command line
 * (directories are walked recursively, in sorted order) to the fuzz target
 * linked with it, once. A target reports a failed property with abort(), so
 * a corpus file that breaks fails this program; the file is named on stderr
 * just before it runs. Exits non-zero when no file was found, so a wrong
 * path cannot pass as an empty success. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replayed;

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    replayed++;
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) return replay_file(path);
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", path);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .., hidden files */
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
            if (!nn) {
                rc = 1;
                break;
            }
            names = nn;
        }
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(l))) {
            rc = 1;
            break;
        }
        snprintf(names[n++], l, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        rc |= replay_path(names[i]);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    int rc = 0;
    for (int i = 1; i < argc; i++) rc |= replay_path(argv[i]);
    printf("replay: %d inputs replayed\n", replayed);
    return rc || replayed == 0;
}
