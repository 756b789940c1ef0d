/* Checks shared by the fuzz targets. */
#ifndef GR_FUZZ_COMMON_H
#define GR_FUZZ_COMMON_H

#include "util/util.h"
#include <stdbool.h>
#include <string.h>

/* Error messages are terminal-safe: names from the input reach them escaped
 * (gr_error escapes every message, and escaping escaped text changes
 * nothing), so escaping a message again must leave it as it is. */
static inline bool fuzz_message_escaped(const char *msg) {
    static char again[8192];
    size_t n = gr_escape_text(again, sizeof again, msg, true);
    return n < sizeof again && !strcmp(again, msg);
}

#endif
