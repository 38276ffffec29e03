/* llama_set_adapter_cvec on libllama.so with the tiny llama fixture (2 layers, n_embd 64) and
 * tests/fixtures/tiny/cvec_llama (make_cvec_fixtures.py: transformers with a hook adding v[il]
 * to decoder layer il's output), each result checked against llama.h and llama.cpp's
 * src/llama-adapter.cpp (llama_adapter_cvec::apply, tensor_for):
 *   - data starts at layer 1: vectors.f32's row 1 as data, range 1..2 (llama.cpp's default end is
 *     n_layer) gives the last row of logits_range.f32 (layer 1 only) within 1e-4, far from no
 *     vector's;
 *   - a zero vector changes no logit bit; a range with no layer of the model (5..9) neither; a
 *     len shorter than one layer sets nothing (llama.cpp copies only whole layers within len);
 *   - NULL data clears the vector: a context that had one and cleared it gives, bit for bit, the
 *     logits of a fresh context (its held positions recomputed);
 *   - set after 10 tokens were decoded: the next 10 give a context's that had it from the start,
 *     bit for bit (the held positions are recomputed under it);
 *   - an n_embd other than the model's gives -1 (llama.cpp's llama_set_adapter_cvec returns -1
 *     for a failed apply) and a log line naming it; a NaN gives -1 (packlm refuses values that are
 *     not finite; llama.cpp would add it).
 *
 *   cvec TINY_FIXTURES_DIR (tests/fixtures/tiny)
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "log_capture.h"

#define N_EMBD 64
#define N_LAYER 2
#define N_VOCAB 300
#define ROWS 20

static int failures, checks;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; fprintf(stderr, "FAIL line %d: ", __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* tiny/llama's golden.json tokens (cvec.json holds the same list). */
static const llama_token TOKENS[ROWS] = {0, 39, 237, 74, 257, 205, 135, 146, 131, 73, 239, 283, 180, 278, 256, 254, 158, 52, 70, 217};

static void read_f32(const char *dir, const char *name, float *out, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f || fread(out, sizeof(float), n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
}

static struct llama_context *new_ctx(struct llama_model *m) {
    struct llama_context_params p = llama_context_default_params();
    p.n_ctx = 128;
    p.n_batch = 128;
    struct llama_context *c = llama_init_from_model(m, p);
    CHECK(c != NULL, "llama_init_from_model");
    return c;
}

/* Decodes TOKENS[from..to) and copies the last row's logits to `out`. */
static void decode(struct llama_context *c, int from, int to, float *out) {
    llama_token toks[ROWS];
    memcpy(toks, TOKENS + from, (size_t)(to - from) * sizeof(llama_token));
    int rc = llama_decode(c, llama_batch_get_one(toks, to - from));
    CHECK(rc == 0, "llama_decode gave %d", rc);
    const float *l = llama_get_logits_ith(c, -1);
    CHECK(l != NULL, "no logits");
    if (l) memcpy(out, l, N_VOCAB * sizeof(float));
}

static float max_abs(const float *a, const float *b) {
    float w = 0;
    for (int i = 0; i < N_VOCAB; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= w)) w = d;
    }
    return w;
}

static bool same_bits(const float *a, const float *b) {
    return memcmp(a, b, N_VOCAB * sizeof(float)) == 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: cvec TINY_FIXTURES_DIR\n");
        return 2;
    }
    char model_dir[2048], dir[2048];
    snprintf(model_dir, sizeof model_dir, "%s/llama", argv[1]);
    snprintf(dir, sizeof dir, "%s/cvec_llama", argv[1]);
    static float vectors[N_LAYER * N_EMBD], want[ROWS * N_VOCAB];
    read_f32(dir, "vectors.f32", vectors, N_LAYER * N_EMBD);
    read_f32(dir, "logits_range.f32", want, ROWS * N_VOCAB);
    const float *want_last = want + (ROWS - 1) * N_VOCAB;
    /* llama.cpp's layout: layer 1 first. */
    const float *layer1 = vectors + N_EMBD;

    llama_log_set(on_log, NULL);
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(model_dir, llama_model_default_params());
    CHECK(m != NULL, "load %s", model_dir);
    if (!m) return 1;
    CHECK(llama_model_n_embd(m) == N_EMBD && llama_model_n_layer(m) == N_LAYER, "the fixture's shape");

    static float plain[N_VOCAB], got[N_VOCAB], again[N_VOCAB];
    struct llama_context *c = new_ctx(m);
    decode(c, 0, ROWS, plain);
    llama_free(c);

    /* The vector on layer 1 (range 1..n_layer, llama.cpp's default): transformers' logits. */
    c = new_ctx(m);
    CHECK(llama_set_adapter_cvec(c, layer1, N_EMBD, N_EMBD, 1, N_LAYER) == 0, "set");
    decode(c, 0, ROWS, got);
    CHECK(max_abs(got, want_last) <= 1e-4f && max_abs(plain, want_last) > 0.1f, "with the vector: max abs %g from transformers, no vector %g", max_abs(got, want_last), max_abs(plain, want_last));
    /* Cleared with positions held: they are recomputed; the next token is a fresh context's. */
    static float fresh_next[N_VOCAB];
    CHECK(llama_set_adapter_cvec(c, NULL, 0, 0, -1, -1) == 0, "clear");
    llama_token next = 42;
    CHECK(llama_decode(c, llama_batch_get_one(&next, 1)) == 0, "decode after clear");
    memcpy(again, llama_get_logits_ith(c, -1), sizeof again);
    llama_free(c);
    c = new_ctx(m);
    decode(c, 0, ROWS, got);
    CHECK(llama_decode(c, llama_batch_get_one(&next, 1)) == 0, "decode");
    memcpy(fresh_next, llama_get_logits_ith(c, -1), sizeof fresh_next);
    CHECK(same_bits(again, fresh_next), "cleared: not a fresh context's bits");
    llama_free(c);

    /* Set after 10 tokens: the held ones are recomputed under it. */
    c = new_ctx(m);
    decode(c, 0, 10, got);
    CHECK(llama_set_adapter_cvec(c, layer1, N_EMBD, N_EMBD, 1, N_LAYER) == 0, "set mid-sequence");
    decode(c, 10, ROWS, again);
    llama_free(c);
    c = new_ctx(m);
    CHECK(llama_set_adapter_cvec(c, layer1, N_EMBD, N_EMBD, 1, N_LAYER) == 0, "set");
    decode(c, 0, ROWS, got);
    CHECK(same_bits(again, got), "set mid-sequence: not the bits of a context that had it from the start");
    llama_free(c);

    /* A zero vector, a range with no layer, a len short of one layer: no logit changes. */
    static float zeros[N_EMBD];
    struct { const float *data; size_t len; int start, end; const char *what; } none[] = {
        {zeros, N_EMBD, 1, N_LAYER, "zero vector"},
        {layer1, N_EMBD, 5, 9, "range 5..9"},
        {layer1, N_EMBD - 1, 1, N_LAYER, "len 63"},
    };
    for (size_t k = 0; k < sizeof none / sizeof none[0]; k++) {
        c = new_ctx(m);
        CHECK(llama_set_adapter_cvec(c, none[k].data, none[k].len, N_EMBD, none[k].start, none[k].end) == 0, "%s", none[k].what);
        decode(c, 0, ROWS, got);
        CHECK(same_bits(got, plain), "%s changed the logits", none[k].what);
        llama_free(c);
    }

    /* Refusals: the context keeps its vector. */
    c = new_ctx(m);
    CHECK(llama_set_adapter_cvec(c, layer1, N_EMBD, N_EMBD, 1, N_LAYER) == 0, "set");
    log_reset();
    CHECK(llama_set_adapter_cvec(c, layer1, N_EMBD, N_EMBD - 1, 1, N_LAYER) == -1, "n_embd 63 accepted");
    CHECK(logged("n_embd"), "no log line names n_embd: %s", log_text);
    static float bad[N_EMBD];
    bad[3] = NAN;
    CHECK(llama_set_adapter_cvec(c, bad, N_EMBD, N_EMBD, 1, N_LAYER) == -1, "a NaN accepted");
    decode(c, 0, ROWS, got);
    CHECK(max_abs(got, want_last) <= 1e-4f, "a refused call changed the vector");
    llama_free(c);

    llama_model_free(m);
    printf("cvec: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
