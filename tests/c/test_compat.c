/* One host program, built twice: against tests/c/abi1/packlm.h (the ABI 1 header, a frozen copy
 * that is never regenerated) and against include/packlm.h. Each build opens the model, makes a
 * session, steps, steps a batch, snapshots, restores, truncates, verifies (greedy and sampled) and
 * samples, with its own header's struct sizes, and writes every result to OUT_FILE; run.sh
 * compares the two files byte for byte. An ABI 1 caller must get exactly what a current one gets.
 * It also checks that a caller's packlm_info gets no byte written past its own size. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"

#define OK(call) CHECK((call) == PACKLM_OK, "%s failed", #call)

static const uint32_t prompt[] = {0, 39, 237, 74, 257, 205, 135, 146, 131, 73, 39, 237, 74};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

static FILE *out;
static void emit(const void *data, size_t n) {
    CHECK(fwrite(data, 1, n, out) == n, "write %zu bytes", n);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_compat MODEL_DIR OUT_FILE\n");
        return 2;
    }
    out = fopen(argv[2], "wb");
    if (!out) return 2;

    packlm_open_options opts;
    OK(packlm_open_options_default(&opts));
    /* packlm_open_options_default writes the ABI 1 layout: ABI 1's whole struct, a prefix of later ones. */
    const size_t abi1_opts = offsetof(packlm_open_options, user_data) + sizeof opts.user_data;
    CHECK(opts.size == abi1_opts && abi1_opts <= sizeof opts, "the default options' size is %zu, the ABI 1 layout's %zu",
          opts.size, abi1_opts);
    opts.threads = 2;
    packlm_model *model = NULL;
    OK(packlm_model_open(argv[1], &opts, &model));
    if (!model) return 1;

    /* The info struct at this header's size, with sentinel bytes after it. */
    union {
        packlm_info info;
        unsigned char bytes[sizeof(packlm_info) + 32];
    } mem;
    memset(&mem, 0xAB, sizeof mem);
    mem.info.size = sizeof(packlm_info);
    OK(packlm_model_info(model, &mem.info));
    size_t past = 0;
    for (size_t i = sizeof(packlm_info); i < sizeof mem; i++) past += mem.bytes[i] != 0xAB;
    CHECK(past == 0, "%zu bytes past the caller's packlm_info (%zu bytes) were written", past, sizeof(packlm_info));
    const packlm_info info = mem.info;
    const uint32_t unset = 0xABABABABu;
    CHECK(info.n_vocab == 300 && info.n_layers != unset && info.n_ctx != unset && info.hidden_size != unset &&
              info.bos == 0 && (uint32_t)info.eos != unset && info.n_stop != unset && info.add_bos <= 1,
          "info fields: vocab %u layers %u ctx %u hidden %u bos %d eos %d stop %u add_bos %u", info.n_vocab,
          info.n_layers, info.n_ctx, info.hidden_size, info.bos, info.eos, info.n_stop, info.add_bos);
    /* Only the ABI 1 fields go to the file: both builds must agree on them. */
    emit((const unsigned char *)&info + sizeof(size_t), 8 * sizeof(uint32_t));
    const size_t nv = info.n_vocab;

    float *logits = malloc(sizeof(float) * nv * N_PROMPT), *other = malloc(sizeof(float) * nv);
    packlm_session_options so = {.size = sizeof so, .n_ctx = 64};
    packlm_session *s = NULL, *t = NULL;
    OK(packlm_session_new(model, &so, &s));
    OK(packlm_session_new(model, &so, &t));
    if (!s || !t) return 1;

    /* step_batch, all rows; then one step. */
    OK(packlm_step_batch(s, prompt, N_PROMPT, PACKLM_WANT_ALL, logits));
    emit(logits, sizeof(float) * nv * N_PROMPT);
    OK(packlm_step(s, 11, logits));
    emit(logits, sizeof(float) * nv);

    /* snapshot into another session, restore, step both. */
    size_t need = 0;
    CHECK(packlm_snapshot(s, NULL, 0, &need) == PACKLM_ERR_BUFFER_TOO_SMALL && need > 0, "snapshot size query");
    uint8_t *snap = malloc(need);
    OK(packlm_snapshot(s, snap, need, &need));
    OK(packlm_restore(t, snap, need));
    OK(packlm_step(s, 12, logits));
    OK(packlm_step(t, 12, other));
    CHECK(memcmp(logits, other, sizeof(float) * nv) == 0, "restored session differs");
    emit(other, sizeof(float) * nv);

    /* truncate back into the prompt and step. */
    OK(packlm_truncate(t, 5));
    OK(packlm_step(t, 42, logits));
    emit(logits, sizeof(float) * nv);

    /* verify, greedy: params and result at this header's sizes (ABI 1: the embedded sampler). */
    const uint32_t draft[] = {7, 8, 9};
    packlm_verify_params vp;
    memset(&vp, 0, sizeof vp);
    vp.size = sizeof vp;
    vp.mode = PACKLM_VERIFY_GREEDY;
    packlm_verify_result vr;
    memset(&vr, 0, sizeof vr);
    vr.size = sizeof vr;
    vr.logits_out = logits;
    OK(packlm_verify(s, 13, draft, 3, &vp, &vr));
    emit(&vr.n_accepted, sizeof vr.n_accepted);
    emit(&vr.next_token, sizeof vr.next_token);
    emit(logits, sizeof(float) * nv);

    /* verify, sampled, with the drafter's probabilities; then packlm_sample. */
    packlm_sampler_params sp = {.size = sizeof sp, .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.0f,
                                .repetition_penalty = 1.0f};
    uint64_t rng = 42;
    float *q = malloc(sizeof(float) * nv * 3);
    for (size_t i = 0; i < nv * 3; i++) q[i] = 1.0f / (float)nv;
    vp.mode = PACKLM_VERIFY_SAMPLED;
#if PACKLM_ABI_VERSION == 1
    vp.sampler = sp;
#else
    vp.sampler = &sp;
    vp.n_draft_probs = nv * 3;
#endif
    vp.draft_probs = q;
    vp.rng_state = &rng;
    OK(packlm_verify(s, vr.next_token, draft, 3, &vp, &vr));
    emit(&vr.n_accepted, sizeof vr.n_accepted);
    emit(&vr.next_token, sizeof vr.next_token);
    emit(&rng, sizeof rng);
    emit(logits, sizeof(float) * nv);
    uint32_t tok = 0;
    OK(packlm_sample(logits, nv, &sp, &rng, &tok));
    emit(&tok, sizeof tok);
    emit(&rng, sizeof rng);
    size_t n_past = 0;
    OK(packlm_session_n_past(s, &n_past));
    emit(&n_past, sizeof n_past);

    packlm_session_free(s);
    packlm_session_free(t);
    packlm_model_free(model);
    free(logits);
    free(other);
    free(snap);
    free(q);
    fclose(out);
    printf("compat (ABI %d header): %d passed, %d failed\n", PACKLM_ABI_VERSION, checks - failures, failures);
    return failures ? 1 : 0;
}
