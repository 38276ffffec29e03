/* ggml_abort's body, in C because it is variadic (printf-style) and stable Rust cannot define a
 * variadic function. src/abort.rs exports `ggml_abort` as a jump to ggml_base_abort below (a
 * symbol of this static archive is not exported from the Rust cdylib by itself).
 *
 * Behaviour, as ggml.c's ggml_abort documents it: flush stdout, make the message
 * "<file>:<line>: <formatted text>" (at most 2047 bytes), give it to the callback set with
 * ggml_set_abort_callback, else print it and a newline on stderr; then abort(). ggml also
 * prints a backtrace (by attaching gdb) unless GGML_NO_BACKTRACE is set; this does not. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*ggml_base_abort_callback)(const char *error_message);

static _Atomic(ggml_base_abort_callback) abort_callback = NULL;

ggml_base_abort_callback ggml_base_set_abort_callback(ggml_base_abort_callback callback) {
    return atomic_exchange(&abort_callback, callback);
}

_Noreturn void ggml_base_abort(const char *file, int line, const char *fmt, ...) {
    char message[2048];
    int used;
    ggml_base_abort_callback callback;
    va_list args;

    fflush(stdout);
    used = snprintf(message, sizeof message, "%s:%d: ", file ? file : "(null)", line);
    if (used < 0) {
        used = 0;
        message[0] = '\0';
    }
    if ((size_t) used < sizeof message && fmt) {
        va_start(args, fmt);
        vsnprintf(message + used, sizeof message - (size_t) used, fmt, args);
        va_end(args);
    }
    callback = atomic_load(&abort_callback);
    if (callback) {
        callback(message);
    } else {
        fprintf(stderr, "%s\n", message);
    }
    abort();
}
