/* The precision open option and packlm_info.precision, on the tiny float pack:
 * - the default is exact for a float pack; fast asked of the reference backend (no
 *   reduced-precision kernels) runs, and reports, exact;
 * - a code that is not 0, 1 or 2 gives PACKLM_ERR_UNSUPPORTED_PRECISION naming it, and no model;
 * - options of the size before `precision` existed open with the default, their bytes past that
 *   size never read; packlm_info of that size gets no byte written past it;
 * - a snapshot taken at exact restores into a session opened at fast. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"

#define OK(call) CHECK((call) == PACKLM_OK, "%s failed", #call)
#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
/* sizeof a struct whose last field is `field`: its end rounded up to the alignment of size_t
 * (every such struct starts with one). */
#define SIZE_ENDING_AT(type, field) ((END_OF(type, field) + _Alignof(size_t) - 1) / _Alignof(size_t) * _Alignof(size_t))
#define SENTINEL 0xAB

static const uint32_t prompt[] = {0, 39, 237, 74, 257, 205};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

/* Opens `dir` with `backend` and `precision` (options at this header's size); NULL on failure. */
static packlm_model *open_at(const char *dir, uint32_t backend, uint32_t precision) {
    packlm_open_options o;
    OK(packlm_open_options_init(&o, sizeof o));
    CHECK(o.precision == PACKLM_PRECISION_DEFAULT, "options_init left precision %u", o.precision);
    o.backend = backend;
    o.precision = precision;
    o.threads = 2;
    packlm_model *m = NULL;
    OK(packlm_model_open(dir, &o, &m));
    return m;
}

/* packlm_info.precision of `m`, at this header's size; 0 when the call fails. */
static uint32_t precision_of(const packlm_model *m) {
    packlm_info info;
    memset(&info, SENTINEL, sizeof info);
    info.size = sizeof info;
    OK(packlm_model_info(m, &info));
    CHECK(info.reserved == 0, "info.reserved is %u", info.reserved);
    return info.precision;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_precision MODEL_DIR\n");
        return 2;
    }
    const char *dir = argv[1];

    /* The default: exact, for a float pack, on the host and on the reference backend; options
     * NULL means the same. */
    packlm_model *host_default = open_at(dir, PACKLM_BACKEND_HOST, PACKLM_PRECISION_DEFAULT);
    packlm_model *null_opts = NULL;
    OK(packlm_model_open(dir, NULL, &null_opts));
    packlm_model *ref_default = open_at(dir, PACKLM_BACKEND_REFERENCE, PACKLM_PRECISION_DEFAULT);
    packlm_model *ref_fast = open_at(dir, PACKLM_BACKEND_REFERENCE, PACKLM_PRECISION_FAST);
    packlm_model *host_exact = open_at(dir, PACKLM_BACKEND_HOST, PACKLM_PRECISION_EXACT);
    packlm_model *host_fast = open_at(dir, PACKLM_BACKEND_HOST, PACKLM_PRECISION_FAST);
    if (!host_default || !null_opts || !ref_default || !ref_fast || !host_exact || !host_fast) return 1;
    CHECK(precision_of(host_default) == PACKLM_PRECISION_EXACT, "host, default precision: %u", precision_of(host_default));
    CHECK(precision_of(null_opts) == PACKLM_PRECISION_EXACT, "NULL options: %u", precision_of(null_opts));
    CHECK(precision_of(ref_default) == PACKLM_PRECISION_EXACT, "reference, default precision: %u", precision_of(ref_default));
    CHECK(precision_of(ref_fast) == PACKLM_PRECISION_EXACT, "reference asked for fast reports %u, not exact", precision_of(ref_fast));
    CHECK(precision_of(host_exact) == PACKLM_PRECISION_EXACT, "host asked for exact reports %u", precision_of(host_exact));
    const uint32_t hf = precision_of(host_fast);
    CHECK(hf == PACKLM_PRECISION_EXACT || hf == PACKLM_PRECISION_FAST, "host asked for fast reports %u", hf);

    /* The JSON description says the same. */
    char json[65536];
    size_t n_json = 0;
    OK(packlm_model_info_json(ref_fast, json, sizeof json, &n_json));
    CHECK(strstr(json, "\"precision\":\"exact\"") != NULL, "info_json of reference/fast: %.200s", json);

    /* Unknown codes: refused, naming the value; *out untouched. */
    const uint32_t bad_codes[] = {3, 7, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad_codes / sizeof bad_codes[0]; i++) {
        packlm_open_options o;
        OK(packlm_open_options_init(&o, sizeof o));
        o.precision = bad_codes[i];
        packlm_model *const no_model = (packlm_model *)(uintptr_t)0x5151;
        packlm_model *m = no_model;
        const packlm_status got = packlm_model_open(dir, &o, &m);
        CHECK(got == PACKLM_ERR_UNSUPPORTED_PRECISION, "precision %u returned %u (%s)", bad_codes[i], (unsigned)got, packlm_status_str(got));
        char want[64];
        snprintf(want, sizeof want, "precision %u ", bad_codes[i]);
        CHECK(strstr(packlm_last_error(), want) != NULL, "the last error should name precision %u", bad_codes[i]);
        CHECK(m == no_model, "model_open wrote *out for precision %u", bad_codes[i]);
    }

    /* Options of the size before `precision` (ABI 1's, which ends at user_data): the bytes
     * past it are the caller's own, here a code that would be refused, and are never read. */
    {
        const size_t before = END_OF(packlm_open_options, user_data);
        CHECK(before <= offsetof(packlm_open_options, precision), "precision starts inside the earlier layout");
        union {
            packlm_open_options o;
            unsigned char b[sizeof(packlm_open_options) + 16];
        } m;
        memset(&m, SENTINEL, sizeof m);
        OK(packlm_open_options_init(&m.o, before));
        CHECK(m.o.size == before && m.o.precision == 0xABABABABu, "options_init at %zu bytes wrote past them", before);
        m.o.backend = PACKLM_BACKEND_REFERENCE;
        packlm_model *old = NULL;
        OK(packlm_model_open(dir, &m.o, &old));
        if (old) {
            CHECK(precision_of(old) == PACKLM_PRECISION_EXACT, "options of %zu bytes: precision %u", before, precision_of(old));
            packlm_model_free(old);
        }
        /* packlm_open_options_default writes that layout too. */
        memset(&m, SENTINEL, sizeof m);
        OK(packlm_open_options_default(&m.o));
        CHECK(m.o.size == before && m.o.precision == 0xABABABABu, "options_default wrote %zu bytes", m.o.size);
        old = NULL;
        OK(packlm_model_open(dir, &m.o, &old));
        packlm_model_free(old);
    }

    /* packlm_info of the size before `precision` (has_chat_template last, then padding, where
     * `reserved` now lies): filled up to that size, nothing past it. */
    {
        const size_t before = SIZE_ENDING_AT(packlm_info, has_chat_template);
        CHECK(before <= offsetof(packlm_info, precision), "precision starts inside the earlier layout's sizeof");
        union {
            packlm_info info;
            unsigned char b[sizeof(packlm_info) + 16];
        } m;
        memset(&m, SENTINEL, sizeof m);
        m.info.size = before;
        OK(packlm_model_info(host_default, &m.info));
        CHECK(m.info.n_vocab == 300 && m.info.has_chat_template == 0, "info of %zu bytes: vocab %u", before, m.info.n_vocab);
        size_t past = 0;
        for (size_t i = before; i < sizeof m; i++) past += m.b[i] != SENTINEL;
        CHECK(past == 0, "%zu bytes past an info of %zu bytes were written", past, before);
    }

    /* A snapshot taken at exact restores into a session opened at fast (same pack). */
    {
        packlm_session *a = NULL, *b = NULL;
        OK(packlm_session_new(host_exact, NULL, &a));
        OK(packlm_session_new(host_fast, NULL, &b));
        if (!a || !b) return 1;
        OK(packlm_step_batch(a, prompt, N_PROMPT, PACKLM_WANT_NONE, NULL));
        size_t need = 0;
        CHECK(packlm_snapshot(a, NULL, 0, &need) == PACKLM_ERR_BUFFER_TOO_SMALL && need > 0, "snapshot size query");
        uint8_t *snap = malloc(need);
        OK(packlm_snapshot(a, snap, need, &need));
        OK(packlm_restore(b, snap, need));
        size_t n_past = 0;
        OK(packlm_session_n_past(b, &n_past));
        CHECK(n_past == N_PROMPT, "restored across precisions: n_past %zu", n_past);
        OK(packlm_step(b, 7, NULL));
        free(snap);
        packlm_session_free(a);
        packlm_session_free(b);
    }

    packlm_model_free(host_default);
    packlm_model_free(null_opts);
    packlm_model_free(ref_default);
    packlm_model_free(ref_fast);
    packlm_model_free(host_exact);
    packlm_model_free(host_fast);
    printf("precision: %d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
