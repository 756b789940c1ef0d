/* tests/check.h — tiny assertion harness for graft's C tests.
 * CHECK records a failure and goes on; CHECK_OK also prints gr_last_error().
 * main() ends with `return check_summary("name");`, which prints
 * "N passed, N failed" and returns non-zero on any failure. */
#ifndef GR_CHECK_H
#define GR_CHECK_H
#include <stdio.h>
#include "graft.h"

static int check_passed_, check_failed_;

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
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}
#endif
