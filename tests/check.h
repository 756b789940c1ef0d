/* tests/check.h — tiny assertion harness for graft's C tests.
 * CHECK records a failure and goes on; CHECK_OK also prints gr_last_error().
 * main() ends with `return check_summary("name");`, which prints
 * "N passed, N failed" and returns non-zero on any failure (a wrong free size too). */
#ifndef GR_CHECK_H
#define GR_CHECK_H
#include <stdio.h>
#include "graft.h"

static int check_passed_, check_failed_;

/* Every C test also checks that each gr_free / gr_realloc passes the size its
 * block was allocated with (see gr_debug_check_free_sizes); check_summary fails
 * on any mismatch. On before main, so every allocation is known. */
__attribute__((constructor)) static void check_free_sizes_on_(void) { gr_debug_check_free_sizes(1); }

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (cond) check_passed_++;                                                 \
        else {                                                                     \
            check_failed_++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                       \
    do {                                                                           \
        if (cond) check_passed_++;                                                 \
        else {                                                                     \
            check_failed_++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                          \
            fputc('\n', stderr);                                                   \
        }                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                       \
    do {                                                                                     \
        gr_status check_st_ = (expr);                                                        \
        if (check_st_ == GR_OK) check_passed_++;                                             \
        else {                                                                               \
            check_failed_++;                                                                 \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr,         \
                    gr_status_name(check_st_), gr_last_error());                             \
        }                                                                                    \
    } while (0)

/* expects a specific failing status and a message containing `needle` */
#define CHECK_ERR(expr, want, needle)                                                        \
    do {                                                                                     \
        gr_status check_st_ = (expr);                                                        \
        if (check_st_ == (want) && strstr(gr_last_error(), (needle))) check_passed_++;       \
        else {                                                                               \
            check_failed_++;                                                                 \
            fprintf(stderr, "%s:%d: %s: expected %s containing \"%s\", got %s: %s\n",        \
                    __FILE__, __LINE__, #expr, gr_status_name(want), (needle),               \
                    gr_status_name(check_st_), gr_last_error());                             \
        }                                                                                    \
    } while (0)

static inline int check_summary(const char *name) {
    long bad_sizes = gr_debug_free_size_errors();
    if (bad_sizes) {
        check_failed_++;
        fprintf(stderr, "%s: %ld frees passed a size other than the allocated one (see above)\n", name, bad_sizes);
    }
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}
#endif
