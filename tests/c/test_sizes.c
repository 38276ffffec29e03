/* The growth rule at its edges, and the capacity-taking calls.
 * - Every struct with a `size` refuses one byte below its first published size (the end of its
 *   last ABI 1 field; for packlm_verify_params, re-published in ABI 2, the end of its last ABI 2
 *   field) and one byte above its current sizeof, with PACKLM_ERR_INVALID_ARGUMENT and a message
 *   naming the size given and both bounds; every output keeps its sentinel and the session is
 *   unchanged.
 * - packlm_step_into, packlm_step_batch_into, the verify result's logits_capacity and the verify
 *   params' n_draft_probs: one float short gives PACKLM_ERR_BUFFER_TOO_SMALL with the floats
 *   needed, buffers and session untouched; the right size gives the bits of the ABI 1 calls. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"

#define OK(call) CHECK((call) == PACKLM_OK, "%s failed", #call)
#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define SENTINEL 0xAB

static const uint32_t prompt[] = {0, 39, 237, 74, 257, 205};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

/* The status, and a last error that names the size given and both bounds. */
static void expect_size_refused(packlm_status got, const char *call, const char *what, const char *type,
                                size_t given, size_t first, int first_abi, size_t current) {
    char want[256];
    snprintf(want, sizeof want, "%s.size is %zu; this library accepts a %s of %zu (its ABI %d size) to %zu bytes",
             what, given, type, first, first_abi, current);
    CHECK(got == PACKLM_ERR_INVALID_ARGUMENT, "%s with size %zu returned %u", call, given, (unsigned)got);
    CHECK(strstr(packlm_last_error(), want) != NULL, "%s: last error should contain \"%s\"", call, want);
}

static int all_sentinel(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != SENTINEL) return 0;
    return 1;
}

static size_t n_past(const packlm_session *s) {
    size_t n = 0;
    OK(packlm_session_n_past(s, &n));
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_sizes MODEL_DIR\n");
        return 2;
    }
    const char *dir = argv[1];

    /* packlm_open_options: model_open refuses (*out untouched); options_init refuses (the
     * struct untouched). */
    const size_t open_first = END_OF(packlm_open_options, user_data);
    packlm_model *const no_model = (packlm_model *)(uintptr_t)0x5151;
    for (int i = 0; i < 2; i++) {
        const size_t size = i ? sizeof(packlm_open_options) + 1 : open_first - 1;
        packlm_open_options o;
        OK(packlm_open_options_init(&o, sizeof o));
        o.size = size;
        packlm_model *model = no_model;
        expect_size_refused(packlm_model_open(dir, &o, &model), "packlm_model_open", "options", "packlm_open_options", size,
                            open_first, 1, sizeof o);
        CHECK(model == no_model, "model_open wrote *out on a refused options size");
        union {
            packlm_open_options o;
            unsigned char b[sizeof(packlm_open_options) + 16];
        } m;
        memset(&m, SENTINEL, sizeof m);
        expect_size_refused(packlm_open_options_init(&m.o, size), "packlm_open_options_init", "options",
                            "packlm_open_options", size, open_first, 1, sizeof o);
        CHECK(all_sentinel(&m, sizeof m), "options_init wrote on a refused size");
    }
    /* The ABI 1 size and the current one are accepted. */
    packlm_open_options opts;
    OK(packlm_open_options_init(&opts, open_first));
    CHECK(opts.size == open_first && opts.backend == PACKLM_BACKEND_HOST, "options_init at the ABI 1 size");
    OK(packlm_open_options_init(&opts, sizeof opts));
    opts.threads = 2;
    packlm_model *model = NULL;
    OK(packlm_model_open(dir, &opts, &model));
    if (!model) return 1;

    /* packlm_info: refused, no byte after `size` written. */
    const size_t info_first = END_OF(packlm_info, add_bos);
    for (int i = 0; i < 2; i++) {
        const size_t size = i ? sizeof(packlm_info) + 1 : info_first - 1;
        union {
            packlm_info info;
            unsigned char b[sizeof(packlm_info) + 16];
        } m;
        memset(&m, SENTINEL, sizeof m);
        m.info.size = size;
        expect_size_refused(packlm_model_info(model, &m.info), "packlm_model_info", "info", "packlm_info", size, info_first, 1,
                            sizeof(packlm_info));
        CHECK(all_sentinel(m.b + sizeof(size_t), sizeof m - sizeof(size_t)), "model_info wrote on a refused size");
    }
    packlm_info info = {.size = sizeof info};
    OK(packlm_model_info(model, &info));
    /* Flags: a bit a call does not know is refused. */
    char text[64];
    size_t n_text = 0;
    const uint32_t one_token = 41;
    CHECK(packlm_detokenize(model, &one_token, 1, 0x4, text, sizeof text, &n_text) == PACKLM_ERR_INVALID_ARGUMENT && n_text == 0,
          "detokenize with an unknown flag bit");
    n_text = 0;
    CHECK(packlm_tokenize(model, "a", 1, 0x4, NULL, 0, &n_text) == PACKLM_ERR_INVALID_ARGUMENT && n_text == 0,
          "tokenize with an unknown flag bit");
    const size_t nv = info.n_vocab;
    CHECK(nv == 300, "n_vocab %zu", nv);

    /* packlm_session_options: refused, *out untouched. */
    const size_t so_first = END_OF(packlm_session_options, n_ctx);
    packlm_session *const no_session = (packlm_session *)(uintptr_t)0x5151;
    for (int i = 0; i < 2; i++) {
        const size_t size = i ? sizeof(packlm_session_options) + 1 : so_first - 1;
        packlm_session_options o = {.size = size, .n_ctx = 64};
        packlm_session *s = no_session;
        expect_size_refused(packlm_session_new(model, &o, &s), "packlm_session_new", "options", "packlm_session_options", size,
                            so_first, 1, sizeof o);
        CHECK(s == no_session, "session_new wrote *out on a refused size");
    }
    packlm_session_options so = {.size = so_first, .n_ctx = 64};
    packlm_session *s = NULL, *t = NULL;
    OK(packlm_session_new(model, &so, &s)); /* the first published size is accepted */
    so.size = sizeof so;
    OK(packlm_session_new(model, &so, &t));
    if (!s || !t) return 1;

    float *logits = malloc(sizeof(float) * nv * N_PROMPT), *want = malloc(sizeof(float) * nv * N_PROMPT);

    /* packlm_sampler_params: packlm_sample refuses; token and rng untouched. */
    for (size_t i = 0; i < nv; i++) logits[i] = (float)(i % 17);
    const size_t sp_first = END_OF(packlm_sampler_params, n_recent);
    for (int i = 0; i < 2; i++) {
        const size_t size = i ? sizeof(packlm_sampler_params) + 1 : sp_first - 1;
        packlm_sampler_params p = {.size = size, .temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
        uint64_t rng = 42;
        uint32_t tok = 0x5151;
        expect_size_refused(packlm_sample(logits, nv, &p, &rng, &tok), "packlm_sample", "params", "packlm_sampler_params", size,
                            sp_first, 1, sizeof p);
        CHECK(rng == 42 && tok == 0x5151, "packlm_sample wrote its outputs on a refused size");
    }

    /* packlm_verify_params (first published in ABI 2): result untouched, session unchanged. */
    OK(packlm_step_batch(s, prompt, N_PROMPT, PACKLM_WANT_NONE, NULL));
    const uint32_t draft[] = {7, 8, 9};
    const size_t vp_first = END_OF(packlm_verify_params, rng_state);
    for (int i = 0; i < 2; i++) {
        const size_t size = i ? sizeof(packlm_verify_params) + 1 : vp_first - 1;
        packlm_verify_params p = {.size = size, .mode = PACKLM_VERIFY_GREEDY};
        union {
            packlm_verify_result r;
            unsigned char b[sizeof(packlm_verify_result)];
        } m;
        memset(&m, SENTINEL, sizeof m);
        m.r.size = sizeof m.r;
        m.r.logits_out = NULL;
        m.r.logits_capacity = 0;
        expect_size_refused(packlm_verify(s, 5, draft, 3, &p, &m.r), "packlm_verify", "params", "packlm_verify_params", size,
                            vp_first, 2, sizeof p);
        CHECK(m.r.n_accepted == 0xABABABABu && m.r.rounds == 0xABABABABABABABABull && all_sentinel(&m.r.n_logits, sizeof(size_t)),
              "verify wrote its result on a refused params size");
        CHECK(n_past(s) == N_PROMPT, "verify changed the session on a refused params size");
    }
    /* The ABI 1 layout's size is read as that layout (run.sh's compat test calls it); one byte
     * either side of it is refused, the message naming it too. */
    struct verify_params_abi1 {
        size_t size;
        uint32_t mode;
        packlm_sampler_params sampler;
        const float *draft_probs;
        uint64_t *rng_state;
    };
    for (int d = -1; d <= 1; d += 2) {
        struct verify_params_abi1 v1;
        memset(&v1, 0, sizeof v1);
        v1.size = sizeof v1 + d;
        packlm_verify_result r = {.size = sizeof r};
        packlm_status got = packlm_verify(s, 5, draft, 3, (const packlm_verify_params *)&v1, &r);
        CHECK(got == PACKLM_ERR_INVALID_ARGUMENT, "verify params of %zu bytes (ABI 1 layout %+d) returned %u", v1.size, d, (unsigned)got);
        char msg[64];
        snprintf(msg, sizeof msg, "(or the ABI 1 layout's %zu)", sizeof v1);
        CHECK(strstr(packlm_last_error(), msg) != NULL, "last error should name the ABI 1 layout's size");
        CHECK(n_past(s) == N_PROMPT && r.rounds == 0, "verify changed the session or result");
    }

    /* packlm_verify_result: refused, nothing after the caller's own fields written. */
    const size_t vr_first = END_OF(packlm_verify_result, accepted);
    packlm_verify_params vp = {.size = sizeof vp, .mode = PACKLM_VERIFY_GREEDY};
    for (int i = 0; i < 2; i++) {
        const size_t size = i ? sizeof(packlm_verify_result) + 1 : vr_first - 1;
        union {
            packlm_verify_result r;
            unsigned char b[sizeof(packlm_verify_result) + 16];
        } m;
        memset(&m, SENTINEL, sizeof m);
        m.r.size = size;
        m.r.logits_out = NULL;
        expect_size_refused(packlm_verify(s, 5, draft, 3, &vp, &m.r), "packlm_verify", "result", "packlm_verify_result", size,
                            vr_first, 1, sizeof m.r);
        CHECK(m.r.n_accepted == 0xABABABABu && m.r.next_token == 0xABABABABu &&
                  all_sentinel(&m.r.rounds, sizeof m - offsetof(packlm_verify_result, rounds)),
              "verify wrote its result on a refused result size");
        CHECK(n_past(s) == N_PROMPT, "verify changed the session on a refused result size");
    }
    /* A result of the ABI 1 size gets no byte written past its size. */
    {
        union {
            packlm_verify_result r;
            unsigned char b[sizeof(packlm_verify_result) + 16];
        } m;
        memset(&m, SENTINEL, sizeof m);
        m.r.size = vr_first;
        m.r.logits_out = logits;
        OK(packlm_verify(t, 5, NULL, 0, &vp, &m.r));
        CHECK(all_sentinel(m.b + vr_first, sizeof m - vr_first), "a result of the ABI 1 size got bytes past its size");
        CHECK(m.r.rounds == 1 && m.r.drafted == 0, "result fields: rounds %llu", (unsigned long long)m.r.rounds);
        OK(packlm_truncate(t, 0));
    }

    /* ---- capacity calls ---- */
    size_t n = 0;
    /* packlm_step_into: one float short. */
    for (size_t i = 0; i < nv; i++) logits[i] = -7.0f;
    CHECK(packlm_step_into(t, prompt[0], logits, nv - 1, &n) == PACKLM_ERR_BUFFER_TOO_SMALL, "step_into short");
    CHECK(n == nv, "step_into needed %zu, want %zu", n, nv);
    CHECK(n_past(t) == 0 && logits[0] == -7.0f && logits[nv - 2] == -7.0f, "step_into wrote on a short buffer");
    /* The right size: the bits of packlm_step. */
    packlm_session *u = NULL;
    OK(packlm_session_new(model, NULL, &u));
    OK(packlm_step(u, prompt[0], want));
    OK(packlm_step_into(t, prompt[0], logits, nv, &n));
    CHECK(n == nv && memcmp(logits, want, sizeof(float) * nv) == 0, "step_into differs from step");

    /* packlm_step_batch_into, all rows and last row. */
    const size_t m = N_PROMPT - 1;
    for (size_t i = 0; i < nv * m; i++) logits[i] = -7.0f;
    n = 0;
    CHECK(packlm_step_batch_into(t, prompt + 1, m, PACKLM_WANT_ALL, logits, nv * m - 1, &n) == PACKLM_ERR_BUFFER_TOO_SMALL,
          "step_batch_into all, short");
    CHECK(n == nv * m && n_past(t) == 1 && logits[0] == -7.0f && logits[nv * m - 2] == -7.0f, "step_batch_into all, short: n %zu", n);
    CHECK(packlm_step_batch_into(t, prompt + 1, m, PACKLM_WANT_LAST, logits, nv - 1, &n) == PACKLM_ERR_BUFFER_TOO_SMALL && n == nv,
          "step_batch_into last, short: n %zu", n);
    CHECK(n_past(t) == 1 && logits[0] == -7.0f, "step_batch_into last, short: wrote");
    /* m x n_vocab that overflows size_t is refused before anything is read. */
    CHECK(packlm_step_batch_into(t, prompt, SIZE_MAX / 2 + 1, PACKLM_WANT_ALL, logits, nv, &n) == PACKLM_ERR_LIMIT_EXCEEDED,
          "m x n_vocab overflow");
    CHECK(n_past(t) == 1, "overflowing batch changed the session");
    /* A token count whose byte length passes the largest object is refused, not read. */
    CHECK(packlm_step_batch(t, prompt, SIZE_MAX / 8 + 1, PACKLM_WANT_NONE, NULL) == PACKLM_ERR_LIMIT_EXCEEDED,
          "m x sizeof(uint32_t) past the largest object");
    CHECK(n_past(t) == 1, "an oversized batch changed the session");
    OK(packlm_step_batch(u, prompt + 1, m, PACKLM_WANT_ALL, want));
    OK(packlm_step_batch_into(t, prompt + 1, m, PACKLM_WANT_ALL, logits, nv * m, &n));
    CHECK(n == nv * m && memcmp(logits, want, sizeof(float) * nv * m) == 0, "step_batch_into all differs from step_batch");
    OK(packlm_truncate(t, 1));
    OK(packlm_truncate(u, 1));
    OK(packlm_step_batch(u, prompt + 1, m, PACKLM_WANT_LAST, want));
    OK(packlm_step_batch_into(t, prompt + 1, m, PACKLM_WANT_LAST, logits, nv, &n));
    CHECK(n == nv && memcmp(logits, want, sizeof(float) * nv) == 0, "step_batch_into last differs from step_batch");

    /* verify: logits_capacity one short, then right; the ABI 1 form (capacity 0) gives the same. */
    packlm_verify_result r;
    memset(&r, SENTINEL, sizeof r);
    r.size = sizeof r;
    r.logits_out = logits;
    r.logits_capacity = nv - 1;
    for (size_t i = 0; i < nv; i++) logits[i] = -7.0f;
    CHECK(packlm_verify(t, 5, draft, 3, &vp, &r) == PACKLM_ERR_BUFFER_TOO_SMALL, "verify logits one short");
    CHECK(r.n_logits == nv, "verify needed %zu, want %zu", r.n_logits, nv);
    CHECK(r.n_accepted == 0xABABABABu && r.next_token == 0xABABABABu && r.rounds == 0xABABABABABABABABull,
          "verify wrote more than n_logits on a short buffer");
    CHECK(logits[0] == -7.0f && n_past(t) == N_PROMPT, "verify, short: logits or session changed");
    r.logits_capacity = nv;
    OK(packlm_verify(t, 5, draft, 3, &vp, &r));
    packlm_verify_result r_old = {.size = sizeof r_old, .logits_out = want};
    OK(packlm_verify(u, 5, draft, 3, &vp, &r_old));
    CHECK(r.n_logits == nv && r_old.n_logits == nv && r.n_accepted == r_old.n_accepted && r.next_token == r_old.next_token,
          "verify with a capacity: n_logits %zu, accepted %u vs %u", r.n_logits, r.n_accepted, r_old.n_accepted);
    CHECK(memcmp(logits, want, sizeof(float) * nv) == 0, "verify with a capacity differs from the ABI 1 form");

    /* verify, sampled: draft probabilities one float short. */
    size_t before = n_past(t);
    float *q = malloc(sizeof(float) * nv * 3);
    for (size_t i = 0; i < nv * 3; i++) q[i] = 1.0f / (float)nv;
    packlm_sampler_params sp = {.size = sizeof sp, .temperature = 0.8f, .top_p = 1.0f, .repetition_penalty = 1.0f};
    uint64_t rng = 42;
    packlm_verify_params vs = {.size = sizeof vs, .mode = PACKLM_VERIFY_SAMPLED, .sampler = &sp, .draft_probs = q,
                               .n_draft_probs = nv * 3 - 1, .rng_state = &rng};
    packlm_verify_result rs = {.size = sizeof rs};
    CHECK(packlm_verify(t, 5, draft, 3, &vs, &rs) == PACKLM_ERR_BUFFER_TOO_SMALL, "draft probs one short");
    char need_msg[64];
    snprintf(need_msg, sizeof need_msg, "= %zu floats", nv * 3);
    CHECK(strstr(packlm_last_error(), need_msg) != NULL, "the message names the floats needed (%s)", need_msg);
    CHECK(rng == 42 && n_past(t) == before && rs.rounds == 0, "draft probs short: state changed");
    vs.n_draft_probs = nv * 3;
    OK(packlm_verify(t, 5, draft, 3, &vs, &rs));
    CHECK(rng != 42 && n_past(t) == before + 1 + rs.n_accepted, "sampled verify with its draft probs");

    packlm_session_free(s);
    packlm_session_free(t);
    packlm_session_free(u);
    packlm_model_free(model);
    free(logits);
    free(want);
    free(q);
    printf("sizes: %d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
