/* Embeddings and LoRA adapters through the C API, on the tiny fixtures:
 * - packlm_embed of tiny/embed_qwen3 with embeddings.json's token ids (the pack's own pooling:
 *   last token, normalized) within 1e-4 of sentence-transformers' vectors; per-token vectors of
 *   its text 2 within 1e-4 of its token_embeddings; a batch equal to one text at a time, bit for
 *   bit; the size query (PACKLM_ERR_BUFFER_TOO_SMALL with the rows and dim), then the right size;
 * - tiny/lora_llama (PEFT folder and GGUF) on tiny/llama at scale 1.0: all rows of lora.json's
 *   tokens within 1e-4 of PEFT's logits_scale1.f32; set_adapters on a session holding positions,
 *   an adapter of another model handle, a scale that is not finite: PACKLM_ERR_INVALID_ARGUMENT;
 *   tiny/lora_other_base: PACKLM_ERR_TENSOR;
 * - NULLs, codes out of range, n_texts 0, a length of 0, lengths that overflow: each its status,
 *   nothing written. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"

#define OK(call) EXPECT_STATUS(call, PACKLM_OK)

static void expect_error_mentions(const char *what) {
    const char *e = packlm_last_error();
    CHECK(e && strstr(e, what), "last error \"%s\" should mention \"%s\"", e ? e : "(null)", what);
}

static char path_buf[4096];
static const char *join(const char *dir, const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

/* The whole file at `path`, NUL-terminated (exits on failure: the fixtures are committed). */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

/* A JSON value that is an array of numbers, or an array of arrays of numbers, under "key" of
 * `json`: the numbers in order into `vals` (at most `cap`), each inner array's count into
 * `lens` (at most `cap_rows`; one entry for a flat array). Returns the number of rows. */
static size_t read_numbers(const char *json, const char *key, double *vals, size_t cap, size_t *lens, size_t cap_rows) {
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) { fprintf(stderr, "no key %s\n", key); exit(2); }
    p = skip_space(p + strlen(quoted));
    if (*p != ':') { fprintf(stderr, "%s: no ':'\n", key); exit(2); }
    p = skip_space(p + 1);
    if (*p != '[') { fprintf(stderr, "%s: not an array\n", key); exit(2); }
    p = skip_space(p + 1);
    const int nested = *p == '[';
    size_t rows = 0, n = 0;
    for (;;) {
        if (nested) {
            if (*p != '[') break;
            p = skip_space(p + 1);
        }
        size_t in_row = 0;
        while (*p != ']') {
            char *end;
            double v = strtod(p, &end);
            if (end == p || n >= cap) { fprintf(stderr, "%s: bad number or too many\n", key); exit(2); }
            vals[n++] = v;
            in_row++;
            p = skip_space(end);
            if (*p == ',') p = skip_space(p + 1);
        }
        if (rows >= cap_rows) { fprintf(stderr, "%s: too many rows\n", key); exit(2); }
        lens[rows++] = in_row;
        p = skip_space(p + 1);
        if (!nested) break;
        if (*p == ',') p = skip_space(p + 1);
    }
    return rows;
}

static float max_abs_diff(const float *a, const double *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - (float)b[i]);
        if (!(d <= m)) m = d; /* NaN counts as the largest */
    }
    return m;
}

enum { MAX_TEXTS = 16, MAX_TOKENS = 256, DIM = 64 };

static void embeddings(const char *tiny) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/embed_qwen3", tiny);
    char *json = slurp(join(dir, "embeddings.json"), NULL);
    static double token_vals[MAX_TOKENS], want[MAX_TEXTS * DIM], want_tok[MAX_TOKENS * DIM];
    size_t lengths[MAX_TEXTS], want_lens[MAX_TEXTS], tok_lens[MAX_TOKENS];
    const size_t n_texts = read_numbers(json, "tokens", token_vals, MAX_TOKENS, lengths, MAX_TEXTS);
    const size_t n_want = read_numbers(json, "embeddings", want, MAX_TEXTS * DIM, want_lens, MAX_TEXTS);
    const size_t n_tok = read_numbers(json, "token_embeddings", want_tok, MAX_TOKENS * DIM, tok_lens, MAX_TOKENS);
    free(json);
    CHECK(n_texts == 5 && n_want == 5 && n_tok == 12 && want_lens[0] == DIM, "embeddings.json: %zu texts, %zu vectors, %zu token vectors", n_texts, n_want, n_tok);
    uint32_t tokens[MAX_TOKENS];
    size_t total = 0;
    for (size_t i = 0; i < n_texts; i++) total += lengths[i];
    for (size_t i = 0; i < total; i++) tokens[i] = (uint32_t)token_vals[i];

    packlm_model *model = NULL;
    OK(packlm_model_open(dir, NULL, &model));
    if (!model) return;

    /* The pack's own: sentence-transformers' last-token pooling, then Normalize; 64 wide. */
    int32_t def_pooling = -7;
    bool def_normalize = false;
    size_t dim = 0;
    OK(packlm_embed_info(model, PACKLM_POOLING_DEFAULT, &def_pooling, &def_normalize, &dim));
    CHECK(def_pooling == PACKLM_POOLING_LAST && def_normalize && dim == DIM, "embed_info: pooling %d, normalize %d, dim %zu", def_pooling, def_normalize, dim);
    dim = 0;
    OK(packlm_embed_info(model, PACKLM_POOLING_NONE, NULL, NULL, &dim));
    CHECK(dim == DIM, "embed_info(NONE): dim %zu (the hidden size, 64)", dim);
    OK(packlm_embed_info(model, PACKLM_POOLING_MEAN, NULL, NULL, NULL));
    EXPECT_STATUS(packlm_embed_info(NULL, PACKLM_POOLING_DEFAULT, NULL, NULL, &dim), PACKLM_ERR_NULL_ARGUMENT);
    dim = 12345;
    EXPECT_STATUS(packlm_embed_info(model, 4, NULL, NULL, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("pooling 4");
    EXPECT_STATUS(packlm_embed_info(model, -2, NULL, NULL, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    CHECK(dim == 12345, "embed_info wrote dim on failure");

    packlm_session *s = NULL;
    OK(packlm_session_new(model, NULL, &s));
    if (!s) { packlm_model_free(model); return; }

    /* The size query: out NULL with cap 0, then a buffer one float short; nothing written but
     * the rows and dim needed. */
    size_t n_rows = 0;
    dim = 0;
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, NULL, NULL, 0, &n_rows, &dim), PACKLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n_rows == n_texts && dim == DIM, "size query: %zu rows x %zu, want %zu x %d", n_rows, dim, n_texts, DIM);
    static float out[MAX_TOKENS * DIM], one[DIM * 2];
    const size_t need = n_texts * DIM;
    for (size_t i = 0; i < MAX_TOKENS * DIM; i++) out[i] = -999.0f;
    n_rows = dim = 0;
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, NULL, out, need - 1, &n_rows, &dim), PACKLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n_rows == n_texts && dim == DIM, "one float short: %zu rows x %zu", n_rows, dim);
    int untouched = 1;
    for (size_t i = 0; i < MAX_TOKENS * DIM; i++) untouched &= out[i] == -999.0f;
    CHECK(untouched, "a buffer too small was written to");

    /* The right size: every vector within 1e-4 of sentence-transformers'. */
    n_rows = dim = 0;
    OK(packlm_embed(s, tokens, lengths, n_texts, NULL, out, need, &n_rows, &dim));
    CHECK(n_rows == n_texts && dim == DIM, "embed: %zu rows x %zu", n_rows, dim);
    float worst = max_abs_diff(out, want, need);
    CHECK(worst <= 1e-4f, "embeddings: max abs %g from sentence-transformers (1e-4 allowed)", worst);
    CHECK(out[need] == -999.0f, "embed wrote past rows x dim");
    /* The same params spelled out, and a struct as large as this header's. */
    packlm_embed_params p = {.size = sizeof p, .pooling = PACKLM_POOLING_DEFAULT, .normalize = -1};
    static float again[MAX_TEXTS * DIM];
    OK(packlm_embed(s, tokens, lengths, n_texts, &p, again, need, &n_rows, &dim));
    CHECK(memcmp(again, out, need * sizeof(float)) == 0, "params {-1, -1} != NULL params");

    /* A batch equals one text at a time, bit for bit. */
    size_t start = 0;
    for (size_t i = 0; i < n_texts; i++) {
        n_rows = dim = 0;
        OK(packlm_embed(s, tokens + start, &lengths[i], 1, NULL, one, DIM, &n_rows, &dim));
        CHECK(n_rows == 1 && dim == DIM, "text %zu alone: %zu rows x %zu", i, n_rows, dim);
        CHECK(memcmp(one, out + i * DIM, DIM * sizeof(float)) == 0, "text %zu alone differs from its row in the batch", i);
        start += lengths[i];
    }

    /* Per-token vectors (pooling none, never normalized) of text 2: HF's last_hidden_state. */
    const size_t t2 = lengths[0] + lengths[1];
    p.pooling = PACKLM_POOLING_NONE;
    p.normalize = -1;
    n_rows = dim = 0;
    EXPECT_STATUS(packlm_embed(s, tokens + t2, &lengths[2], 1, &p, NULL, 0, &n_rows, &dim), PACKLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n_rows == lengths[2] && dim == DIM, "per-token size: %zu rows x %zu, want %zu x %d", n_rows, dim, lengths[2], DIM);
    OK(packlm_embed(s, tokens + t2, &lengths[2], 1, &p, out, MAX_TOKENS * DIM, &n_rows, &dim));
    worst = max_abs_diff(out, want_tok, n_tok * DIM);
    CHECK(n_rows == n_tok && worst <= 1e-4f, "token vectors: %zu rows, max abs %g from HF (1e-4 allowed)", n_rows, worst);
    /* Rows of NONE for all texts: one per token. */
    OK(packlm_embed(s, tokens, lengths, n_texts, &p, out, MAX_TOKENS * DIM, &n_rows, &dim));
    CHECK(n_rows == total, "pooling none over every text: %zu rows, want %zu", n_rows, total);

    /* Bad input: each its status; *n_rows, *dim and out untouched. */
    n_rows = dim = 777;
    out[0] = -999.0f;
    EXPECT_STATUS(packlm_embed(NULL, tokens, lengths, n_texts, NULL, out, need, &n_rows, &dim), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, NULL, out, need, NULL, &dim), PACKLM_ERR_NULL_ARGUMENT);
    expect_error_mentions("n_rows");
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, NULL, out, need, &n_rows, NULL), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_embed(s, tokens, NULL, n_texts, NULL, out, need, &n_rows, &dim), PACKLM_ERR_NULL_ARGUMENT);
    expect_error_mentions("lengths");
    EXPECT_STATUS(packlm_embed(s, NULL, lengths, n_texts, NULL, NULL, 0, &n_rows, &dim), PACKLM_ERR_NULL_ARGUMENT);
    expect_error_mentions("tokens");
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, NULL, NULL, need, &n_rows, &dim), PACKLM_ERR_NULL_ARGUMENT);
    expect_error_mentions("out");
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, 0, NULL, out, need, &n_rows, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("n_texts");
    size_t with_empty[2] = {2, 0};
    EXPECT_STATUS(packlm_embed(s, tokens, with_empty, 2, NULL, out, need, &n_rows, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("lengths[1]");
    size_t overflow[2] = {SIZE_MAX, 2};
    EXPECT_STATUS(packlm_embed(s, tokens, overflow, 2, NULL, out, need, &n_rows, &dim), PACKLM_ERR_LIMIT_EXCEEDED);
    expect_error_mentions("lengths");
    packlm_embed_params bad = {.size = sizeof bad, .pooling = 4, .normalize = -1};
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, &bad, out, need, &n_rows, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("params.pooling 4");
    bad.pooling = -2;
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, &bad, out, need, &n_rows, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("params.pooling -2");
    bad.pooling = PACKLM_POOLING_MEAN;
    bad.normalize = 2;
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, &bad, out, need, &n_rows, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("params.normalize 2");
    bad.normalize = -1;
    bad.size = sizeof bad + 1;
    EXPECT_STATUS(packlm_embed(s, tokens, lengths, n_texts, &bad, out, need, &n_rows, &dim), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("params.size");
    uint32_t out_of_vocab[2] = {1, 1000000};
    size_t two = 2;
    EXPECT_STATUS(packlm_embed(s, out_of_vocab, &two, 1, NULL, out, need, &n_rows, &dim), PACKLM_ERR_TOKEN_OUT_OF_RANGE);
    CHECK(n_rows == 777 && dim == 777 && out[0] == -999.0f, "a refused embed wrote its outputs");
    /* Embedding leaves the session's positions as they were. */
    size_t n_past = 99;
    OK(packlm_session_n_past(s, &n_past));
    CHECK(n_past == 0, "embed changed the session's positions: %zu", n_past);

    packlm_session_free(s);
    packlm_model_free(model);
}

static void adapters(const char *tiny) {
    char base[4096], lora[4096], other[4096];
    snprintf(base, sizeof base, "%s/llama", tiny);
    snprintf(lora, sizeof lora, "%s/lora_llama", tiny);
    snprintf(other, sizeof other, "%s/lora_other_base", tiny);
    char *json = slurp(join(lora, "lora.json"), NULL);
    static double token_vals[MAX_TOKENS];
    size_t row_len[1];
    read_numbers(json, "tokens", token_vals, MAX_TOKENS, row_len, 1);
    free(json);
    const size_t m = row_len[0];
    uint32_t tokens[MAX_TOKENS];
    for (size_t i = 0; i < m; i++) tokens[i] = (uint32_t)token_vals[i];
    size_t golden_bytes = 0;
    float *golden = (float *)slurp(join(lora, "logits_scale1.f32"), &golden_bytes);
    const size_t n_vocab = 300;
    CHECK(m == 20 && golden_bytes == m * n_vocab * sizeof(float), "lora.json: %zu tokens, %zu bytes of logits", m, golden_bytes);

    packlm_model *model = NULL;
    OK(packlm_model_open(base, NULL, &model));
    if (!model) { free(golden); return; }

    packlm_adapter *a = NULL;
    EXPECT_STATUS(packlm_adapter_open(NULL, lora, &a), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_adapter_open(model, NULL, &a), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_adapter_open(model, lora, NULL), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_adapter_open(model, join(tiny, "no_such_adapter"), &a), PACKLM_ERR_IO);
    EXPECT_STATUS(packlm_adapter_open(model, other, &a), PACKLM_ERR_TENSOR);
    EXPECT_STATUS(packlm_adapter_open(model, join(other, "adapter.gguf"), &a), PACKLM_ERR_TENSOR);
    CHECK(a == NULL, "adapter_open wrote *out on failure");

    const char *sources[2] = {lora, "adapter.gguf"};
    for (int k = 0; k < 2; k++) {
        a = NULL;
        OK(packlm_adapter_open(model, k == 0 ? lora : join(lora, sources[1]), &a));
        if (!a) continue;
        uint32_t rank = 0;
        float alpha = 0;
        OK(packlm_adapter_info(a, &rank, &alpha));
        /* lora.json: r 4; alpha 8 (PEFT's lora_alpha; the GGUF's adapter.lora.alpha = scaling x r). */
        CHECK(rank == 4 && alpha == 8.0f, "adapter %d: rank %u, alpha %g", k, rank, alpha);
        OK(packlm_adapter_info(a, NULL, NULL));
        EXPECT_STATUS(packlm_adapter_info(NULL, &rank, &alpha), PACKLM_ERR_NULL_ARGUMENT);

        packlm_session *s = NULL;
        OK(packlm_session_new(model, NULL, &s));
        if (!s) { packlm_adapter_free(a); continue; }
        const float scale = 1.0f;
        const packlm_adapter *set[1] = {a};
        OK(packlm_session_set_adapters(s, set, &scale, 1));
        /* The session holds its own reference: the handle may go before the session steps. */
        packlm_adapter_free(a);
        a = NULL;
        static float logits[20 * 300];
        size_t n = 0;
        OK(packlm_step_batch_into(s, tokens, m, PACKLM_WANT_ALL, logits, m * n_vocab, &n));
        float worst = 0;
        for (size_t i = 0; i < m * n_vocab; i++) {
            float d = fabsf(logits[i] - golden[i]);
            if (!(d <= worst)) worst = d;
        }
        CHECK(n == m * n_vocab && worst <= 1e-4f, "adapter %d at scale 1: max abs %g from PEFT (1e-4 allowed)", k, worst);
        /* A session holding positions refuses a change of adapters, to none too. */
        EXPECT_STATUS(packlm_session_set_adapters(s, NULL, NULL, 0), PACKLM_ERR_INVALID_ARGUMENT);
        expect_error_mentions("positions");
        packlm_session_free(s);
    }

    /* Bad calls on an empty session. */
    packlm_session *s = NULL;
    OK(packlm_session_new(model, NULL, &s));
    OK(packlm_adapter_open(model, lora, &a));
    const packlm_adapter *set[2] = {a, NULL};
    const float scales[2] = {1.0f, 1.0f};
    const float inf = INFINITY;
    EXPECT_STATUS(packlm_session_set_adapters(NULL, set, scales, 1), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_session_set_adapters(s, NULL, scales, 1), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_session_set_adapters(s, set, NULL, 1), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_session_set_adapters(s, set, scales, 2), PACKLM_ERR_NULL_ARGUMENT);
    expect_error_mentions("adapters[1]");
    EXPECT_STATUS(packlm_session_set_adapters(s, set, &inf, 1), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("finite");
    OK(packlm_session_set_adapters(s, NULL, NULL, 0));
    /* An adapter opened for another handle of the same pack is refused. */
    packlm_model *model2 = NULL;
    packlm_session *s2 = NULL;
    OK(packlm_model_open(base, NULL, &model2));
    OK(packlm_session_new(model2, NULL, &s2));
    EXPECT_STATUS(packlm_session_set_adapters(s2, set, scales, 1), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("another model");
    packlm_session_free(s2);
    packlm_model_free(model2);
    packlm_adapter_free(a);
    packlm_adapter_free(NULL);
    packlm_session_free(s);
    packlm_model_free(model);
    free(golden);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_embed TINY_FIXTURES_DIR (tests/fixtures/tiny)\n");
        return 2;
    }
    embeddings(argv[1]);
    adapters(argv[1]);
    printf("test_embed: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
