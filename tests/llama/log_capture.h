/* The library's log lines, kept for a failing check to print, shared by the llama.h test
 * programs: `on_log` as llama_log_set's callback (a non-NULL user_data is an int counted up per
 * line), `log_reset` to start again, `logged` to ask whether a line since named a text, and
 * `check_failed` to stop a program with the failed condition, its place and the log. */
#ifndef PACKLM_TESTS_LOG_CAPTURE_H
#define PACKLM_TESTS_LOG_CAPTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

static char log_text[1 << 16];
static size_t log_len;

static inline void on_log(enum ggml_log_level level, const char *text, void *user_data) {
    (void)level;
    if (user_data) ++*(int *)user_data;
    size_t n = strlen(text);
    if (log_len + n < sizeof log_text) {
        memcpy(log_text + log_len, text, n + 1);
        log_len += n;
    }
}

static inline void log_reset(void) {
    log_len = 0;
    log_text[0] = 0;
}

/* Whether a log line since log_reset named `what`. */
static inline bool logged(const char *what) {
    return strstr(log_text, what) != NULL;
}

static inline void check_failed(const char *cond, const char *file, int line) {
    fprintf(stderr, "FAIL: %s (%s:%d)\n%s", cond, file, line, log_text);
    exit(1);
}

#endif
