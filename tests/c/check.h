/* Shared by the C tests: CHECK counts and reports a failed condition with packlm's last error. */
#ifndef PACKLM_TEST_CHECK_H
#define PACKLM_TEST_CHECK_H
#include <stdio.h>

#include "packlm.h"

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            failures++;                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, " [last error: %s]\n", packlm_last_error());        \
        }                                                                       \
    } while (0)

/* `call` returns the status `want`. */
#define EXPECT_STATUS(call, want)                                               \
    do {                                                                        \
        packlm_status got_ = (call);                                            \
        CHECK(got_ == (want), "%s returned %d (%s), want %d", #call, (int)got_, \
              packlm_status_str(got_), (int)(want));                            \
    } while (0)

#endif
