/* Control vectors through the C API, on tiny/llama and tiny/cvec_llama
 * (tests/fixtures/make_cvec_fixtures.py: transformers with a hook adding v[il] to each decoder
 * layer's output):
 * - packlm_control_vector_from_data(vectors.f32, layers 0..1): every row within 1e-4 of
 *   logits_data.f32; packlm_control_vector_open(a.gguf x 0.75 + b.gguf x -0.5, layers 1..1):
 *   within 1e-4 of logits_gguf.f32; no vector is far from both (the check can fail);
 * - the handle may be freed before the session steps; NULL clears the session's vector and gives
 *   the bits of a fresh session; a zero vector gives them too;
 * - a session holding positions, a vector of another model handle: PACKLM_ERR_INVALID_ARGUMENT;
 * - a wrong width or length, a range past the layers: PACKLM_ERR_INVALID_ARGUMENT; a NaN:
 *   PACKLM_ERR_NON_FINITE; a missing file: PACKLM_ERR_IO; a model pack that is no control vector:
 *   PACKLM_ERR_FORMAT; NULLs: PACKLM_ERR_NULL_ARGUMENT; nothing written on failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"

#define OK(call) EXPECT_STATUS(call, PACKLM_OK)
#define ROWS 20
#define VOCAB 300
#define LAYERS 2
#define HIDDEN 64

static void expect_error_mentions(const char *what) {
    const char *e = packlm_last_error();
    CHECK(e && strstr(e, what), "last error \"%s\" should mention \"%s\"", e ? e : "(null)", what);
}

static void read_f32(const char *dir, const char *name, float *out, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f || fread(out, sizeof(float), n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
}

/* tiny/llama's golden.json tokens (the fixture's cvec.json holds the same list). */
static const uint32_t TOKENS[ROWS] = {0, 39, 237, 74, 257, 205, 135, 146, 131, 73, 239, 283, 180, 278, 256, 254, 158, 52, 70, 217};

static float max_abs(const float *a, const float *b, size_t n) {
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* All rows of TOKENS on a new session of `model` with `cv` (NULL: none) into `out`. */
static void run(packlm_model *model, const packlm_control_vector *cv, float *out) {
    packlm_session *s = NULL;
    OK(packlm_session_new(model, NULL, &s));
    if (!s) return;
    OK(packlm_session_set_control_vector(s, cv));
    size_t n = 0;
    OK(packlm_step_batch_into(s, TOKENS, ROWS, PACKLM_WANT_ALL, out, ROWS * VOCAB, &n));
    CHECK(n == ROWS * VOCAB, "step_batch_into wrote %zu values", n);
    packlm_session_free(s);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_control_vector TINY_FIXTURES_DIR (tests/fixtures/tiny)\n");
        return 2;
    }
    char base[2048], dir[2048], a_path[4096], b_path[4096];
    snprintf(base, sizeof base, "%s/llama", argv[1]);
    snprintf(dir, sizeof dir, "%s/cvec_llama", argv[1]);
    snprintf(a_path, sizeof a_path, "%s/a.gguf", dir);
    snprintf(b_path, sizeof b_path, "%s/b.gguf", dir);
    static float vectors[LAYERS * HIDDEN], want_data[ROWS * VOCAB], want_gguf[ROWS * VOCAB];
    static float plain[ROWS * VOCAB], got[ROWS * VOCAB];
    read_f32(dir, "vectors.f32", vectors, LAYERS * HIDDEN);
    read_f32(dir, "logits_data.f32", want_data, ROWS * VOCAB);
    read_f32(dir, "logits_gguf.f32", want_gguf, ROWS * VOCAB);

    packlm_model *model = NULL;
    OK(packlm_model_open(base, NULL, &model));
    if (!model) return 1;
    run(model, NULL, plain);

    packlm_control_vector *cv = NULL;
    OK(packlm_control_vector_from_data(model, vectors, LAYERS * HIDDEN, HIDDEN, 0, LAYERS - 1, &cv));
    packlm_session *s = NULL;
    OK(packlm_session_new(model, NULL, &s));
    OK(packlm_session_set_control_vector(s, cv));
    /* The session holds its own reference: the handle may go before the session steps. */
    packlm_control_vector_free(cv);
    size_t n = 0;
    OK(packlm_step_batch_into(s, TOKENS, ROWS, PACKLM_WANT_ALL, got, ROWS * VOCAB, &n));
    float d = max_abs(got, want_data, ROWS * VOCAB), d0 = max_abs(plain, want_data, ROWS * VOCAB);
    CHECK(d <= 1e-4f && d0 > 0.1f, "from data: max abs %g from transformers (1e-4 allowed), no vector %g", d, d0);
    /* A session holding positions refuses a change, to none too. */
    EXPECT_STATUS(packlm_session_set_control_vector(s, NULL), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("positions");
    /* After truncate(0), NULL clears it: the bits of a session that never had one. */
    OK(packlm_truncate(s, 0));
    OK(packlm_session_set_control_vector(s, NULL));
    OK(packlm_step_batch_into(s, TOKENS, ROWS, PACKLM_WANT_ALL, got, ROWS * VOCAB, &n));
    CHECK(memcmp(got, plain, sizeof plain) == 0, "a cleared vector differs from a fresh session");
    packlm_session_free(s);

    const char *paths[2] = {a_path, b_path};
    const float scales[2] = {0.75f, -0.5f};
    cv = NULL;
    OK(packlm_control_vector_open(model, paths, scales, 2, 1, LAYERS - 1, &cv));
    run(model, cv, got);
    d = max_abs(got, want_gguf, ROWS * VOCAB);
    d0 = max_abs(plain, want_gguf, ROWS * VOCAB);
    CHECK(d <= 1e-4f && d0 > 0.1f, "from GGUFs: max abs %g from transformers (1e-4 allowed), no vector %g", d, d0);

    /* A vector of another model handle of the same pack is refused. */
    packlm_model *model2 = NULL;
    OK(packlm_model_open(base, NULL, &model2));
    OK(packlm_session_new(model2, NULL, &s));
    EXPECT_STATUS(packlm_session_set_control_vector(s, cv), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("another model");
    EXPECT_STATUS(packlm_session_set_control_vector(NULL, cv), PACKLM_ERR_NULL_ARGUMENT);
    packlm_session_free(s);
    packlm_model_free(model2);
    packlm_control_vector_free(cv);
    packlm_control_vector_free(NULL);

    /* A zero vector: the bits of none. */
    static float zeros[LAYERS * HIDDEN];
    cv = NULL;
    OK(packlm_control_vector_from_data(model, zeros, LAYERS * HIDDEN, HIDDEN, 0, LAYERS - 1, &cv));
    run(model, cv, got);
    CHECK(memcmp(got, plain, sizeof plain) == 0, "a zero vector differs from none");
    packlm_control_vector_free(cv);

    /* Bad input: each its status, *out untouched. */
    cv = NULL;
    EXPECT_STATUS(packlm_control_vector_from_data(model, vectors, LAYERS * HIDDEN, HIDDEN + 1, 0, 1, &cv), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("hidden size is 64");
    EXPECT_STATUS(packlm_control_vector_from_data(model, vectors, HIDDEN, HIDDEN, 0, 1, &cv), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("2 layers x 64");
    EXPECT_STATUS(packlm_control_vector_from_data(model, vectors, LAYERS * HIDDEN, HIDDEN, 0, 2, &cv), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("0..=2");
    vectors[HIDDEN + 5] = NAN;
    EXPECT_STATUS(packlm_control_vector_from_data(model, vectors, LAYERS * HIDDEN, HIDDEN, 0, 1, &cv), PACKLM_ERR_NON_FINITE);
    expect_error_mentions("layer 1, element 5");
    EXPECT_STATUS(packlm_control_vector_from_data(NULL, vectors, LAYERS * HIDDEN, HIDDEN, 0, 1, &cv), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_control_vector_from_data(model, NULL, LAYERS * HIDDEN, HIDDEN, 0, 1, &cv), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_control_vector_from_data(model, zeros, LAYERS * HIDDEN, HIDDEN, 0, 1, NULL), PACKLM_ERR_NULL_ARGUMENT);
    char missing[4096], model_file[4096];
    snprintf(missing, sizeof missing, "%s/no_such.gguf", dir);
    snprintf(model_file, sizeof model_file, "%s/lora_llama/adapter.gguf", argv[1]);
    const char *bad[1] = {missing};
    EXPECT_STATUS(packlm_control_vector_open(model, bad, scales, 1, 1, 1, &cv), PACKLM_ERR_IO);
    bad[0] = model_file;
    EXPECT_STATUS(packlm_control_vector_open(model, bad, scales, 1, 1, 1, &cv), PACKLM_ERR_FORMAT);
    expect_error_mentions("not a control vector");
    const char *with_null[2] = {a_path, NULL};
    EXPECT_STATUS(packlm_control_vector_open(model, with_null, scales, 2, 1, 1, &cv), PACKLM_ERR_NULL_ARGUMENT);
    expect_error_mentions("paths[1]");
    EXPECT_STATUS(packlm_control_vector_open(model, paths, NULL, 2, 1, 1, &cv), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_control_vector_open(model, paths, scales, 0, 1, 1, &cv), PACKLM_ERR_INVALID_ARGUMENT);
    CHECK(cv == NULL, "a failed call wrote *out");

    packlm_model_free(model);
    printf("test_control_vector: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
