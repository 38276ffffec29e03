/* The C API as a host program uses it: open, tokenize, step, step_batch, free; and bad input,
 * each giving its status and a message, with no abort and the session still usable after. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"


static void expect_error_mentions(const char *what) {
    const char *e = packlm_last_error();
    CHECK(e && strstr(e, what), "last error \"%s\" should mention \"%s\"", e ? e : "(null)", what);
}

static int log_calls = 0;
static char log_last[512];
static void on_log(int level, const char *message, void *user_data) {
    (void)level;
    log_calls += *(int *)user_data;
    snprintf(log_last, sizeof log_last, "%s", message);
}

static char path_buf[4096];
static const char *join(const char *dir, const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

/* The "tokens" array of `dir`/golden.json into `out`: their count, or 0 when it cannot be read. */
static size_t golden_tokens(const char *dir, uint32_t *out, size_t cap) {
    char path[4096], text[8192];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    const char *p = strstr(text, "\"tokens\"");
    if (!p || !(p = strchr(p, '['))) return 0;
    size_t n = 0;
    for (p++; n < cap;) {
        char *end = NULL;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p) break;
        out[n++] = (uint32_t)v;
        for (p = end; *p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'; p++) {}
        if (*p != ',') break;
        p++;
    }
    return *p == ']' ? n : 0;
}

/* What an open's progress callback saw: its last fraction, whether one was below the one before,
 * how many fell strictly between 0.5 and 1, and after how many of those to return false (0:
 * never). */
typedef struct {
    float last;
    int decreased;
    int past_half;
    int stop_after;
} open_progress;

static bool on_open_progress(float fraction, void *user_data) {
    open_progress *p = user_data;
    p->decreased |= fraction < p->last;
    p->last = fraction;
    p->past_half += fraction > 0.5f && fraction < 1.0f;
    return !(p->stop_after && p->past_half >= p->stop_after);
}

/* compile_ahead = 100 on the tiny llama (context 128): the open compiles the graphs of 14 pass
 * shapes (parts of 1 to 64 rows ending at 64 and at 100, graph::ahead_passes) and reports each
 * as its second half, so at least 13 fractions fall between 0.5 and 1 (an open without it
 * reports only its layers'). A callback that says stop at the fifth of those (only the compiles
 * report so many) ends the open with PACKLM_ERR_ABORTED, no model, and is not called again. The
 * model opened so computes what one opened without it does, bit for bit. */
static void npu_compile_ahead(const char *tiny, const uint32_t *tokens, size_t n_tokens) {
    packlm_model *plain = NULL, *ahead = NULL;
    packlm_open_options o;
    open_progress seen = {0};
    packlm_open_options_init(&o, sizeof o);
    o.backend = PACKLM_BACKEND_NPU;
    o.progress = on_open_progress;
    o.user_data = &seen;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &plain), PACKLM_OK);
    CHECK(seen.past_half < 13 && seen.last == 1.0f, "an open without compile_ahead: %d fractions in (0.5, 1), last %g", seen.past_half, seen.last);
    memset(&seen, 0, sizeof seen);
    o.compile_ahead = 100;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &ahead), PACKLM_OK);
    CHECK(seen.past_half >= 13 && !seen.decreased && seen.last == 1.0f,
          "compile_ahead 100: %d fractions in (0.5, 1) (want at least 13), decreasing %d, last %g", seen.past_half, seen.decreased, seen.last);
    memset(&seen, 0, sizeof seen);
    seen.stop_after = 5;
    packlm_model *stopped = NULL;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &stopped), PACKLM_ERR_ABORTED);
    CHECK(stopped == NULL && seen.past_half == 5 && seen.last > 0.5f && seen.last < 1.0f,
          "stopped while compiling: model %p, %d fractions in (0.5, 1), last %g", (void *)stopped, seen.past_half, seen.last);
    packlm_model_free(stopped);
    if (!plain || !ahead) {
        packlm_model_free(plain);
        packlm_model_free(ahead);
        return;
    }
    static float a[64 * 300], b[64 * 300];
    packlm_session *ps = NULL, *as = NULL;
    EXPECT_STATUS(packlm_session_new(plain, NULL, &ps), PACKLM_OK);
    EXPECT_STATUS(packlm_session_new(ahead, NULL, &as), PACKLM_OK);
    EXPECT_STATUS(packlm_step_batch(ps, tokens, n_tokens, PACKLM_WANT_ALL, a), PACKLM_OK);
    EXPECT_STATUS(packlm_step_batch(as, tokens, n_tokens, PACKLM_WANT_ALL, b), PACKLM_OK);
    CHECK(memcmp(a, b, n_tokens * 300 * sizeof(float)) == 0, "compile_ahead changed the logits of the golden tokens");
    packlm_session_free(ps);
    packlm_session_free(as);
    packlm_model_free(plain);
    packlm_model_free(ahead);
}

/* The size of the file at `path`, or -1 when it cannot be opened. */
static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* export_onnx_dir: the open creates the folder (and its missing parent); a step_batch compiles
 * at least one graph, which is written there as graphN_rowsR_kvK.onnx beside a non-empty
 * weights.bin, and graphs.json names every such file, each of which is there and not empty. A
 * folder under a regular file cannot be created: PACKLM_ERR_IO naming it, and no model. */
static void npu_export_onnx(const char *tiny, const char *tmp, const uint32_t *tokens, size_t n_tokens) {
    char dir[1024], path[4096], name[256], manifest[1 << 16];
    snprintf(dir, sizeof dir, "%s/export/graphs", tmp);
    packlm_open_options o;
    packlm_model *model = NULL;
    packlm_open_options_init(&o, sizeof o);
    o.backend = PACKLM_BACKEND_NPU;
    o.export_onnx_dir = dir;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &model), PACKLM_OK);
    if (!model) return;
    packlm_session *s = NULL;
    static float logits[64 * 300];
    EXPECT_STATUS(packlm_session_new(model, NULL, &s), PACKLM_OK);
    EXPECT_STATUS(packlm_step_batch(s, tokens, n_tokens, PACKLM_WANT_ALL, logits), PACKLM_OK);
    packlm_session_free(s);
    packlm_model_free(model);
    model = NULL;
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    CHECK(file_size(path) > 0, "%s: %ld bytes", path, file_size(path));
    snprintf(path, sizeof path, "%s/graphs.json", dir);
    FILE *f = fopen(path, "rb");
    size_t len = f ? fread(manifest, 1, sizeof manifest - 1, f) : 0;
    if (f) fclose(f);
    manifest[len] = 0;
    CHECK(len > 0 && strstr(manifest, "\"graphs\""), "%s: \"%.200s\"", path, manifest);
    int graphs = 0;
    for (const char *p = manifest; (p = strstr(p, "\"file\": \"")) != NULL; graphs++) {
        p += strlen("\"file\": \"");
        const char *end = strchr(p, '"');
        if (!end) break;
        size_t n = (size_t)(end - p) < sizeof name ? (size_t)(end - p) : sizeof name - 1;
        memcpy(name, p, n);
        name[n] = 0;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        CHECK(n > 10 && strncmp(name, "graph", 5) == 0 && strcmp(name + n - 5, ".onnx") == 0, "graphs.json names \"%s\"", name);
        CHECK(file_size(path) > 0, "%s (named by graphs.json): %ld bytes", path, file_size(path));
        p = end;
    }
    CHECK(graphs >= 1, "graphs.json names %d graphs, want at least 1: \"%.200s\"", graphs, manifest);

    char blocker[512];
    snprintf(blocker, sizeof blocker, "%s/export_not_a_folder", tmp);
    f = fopen(blocker, "wb");
    CHECK(f != NULL, "cannot create %s", blocker);
    if (f) fclose(f);
    snprintf(dir, sizeof dir, "%s/graphs", blocker);
    o.export_onnx_dir = dir;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &model), PACKLM_ERR_IO);
    expect_error_mentions(dir);
    CHECK(model == NULL, "out-parameter written on failure");
}

/* The npu backend on ONNX Runtime's CPU execution provider, its library named by
 * PACKLM_ONNXRUNTIME (make c-test sets it, and PACKLM_REQUIRE_ONNXRUNTIME, so that a missing
 * runtime fails there); skipped, saying why, only when neither is set. The options come from
 * packlm_open_options_init: packlm_open_options_default fills ABI 1's fields only, and the
 * provider fields are past them. */
static void npu_backend(const char *tiny, const char *bad) {
    packlm_model *model = NULL;
    packlm_open_options o;
    /* A library that cannot be loaded: unavailable, naming the path (the option in place of
     * PACKLM_ONNXRUNTIME). Needs no ONNX Runtime. */
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/libonnxruntime.so.1", bad);
    EXPECT_STATUS(packlm_open_options_init(&o, sizeof o), PACKLM_OK);
    o.backend = PACKLM_BACKEND_NPU;
    o.onnxruntime_library = missing;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &model), PACKLM_ERR_BACKEND_UNAVAILABLE);
    expect_error_mentions(missing);
    CHECK(model == NULL, "out-parameter written on failure");

    const char *lib = getenv("PACKLM_ONNXRUNTIME");
    if ((!lib || !*lib) && !getenv("PACKLM_REQUIRE_ONNXRUNTIME")) {
        fprintf(stderr, "note: npu part skipped: PACKLM_ONNXRUNTIME (ONNX Runtime's library) and PACKLM_REQUIRE_ONNXRUNTIME are unset\n");
        return;
    }
    /* "qnn" is not in the CPU build: unavailable, naming it; the cpu provider takes no options. */
    packlm_open_options_init(&o, sizeof o);
    o.backend = PACKLM_BACKEND_NPU;
    o.provider = "qnn";
    EXPECT_STATUS(packlm_model_open(tiny, &o, &model), PACKLM_ERR_BACKEND_UNAVAILABLE);
    expect_error_mentions("\"qnn\"");
    o.provider = NULL;
    o.provider_options = "intra_op_num_threads=1";
    EXPECT_STATUS(packlm_model_open(tiny, &o, &model), PACKLM_ERR_INVALID_ARGUMENT);
    expect_error_mentions("intra_op_num_threads=1");
    CHECK(model == NULL, "out-parameter written on failure");

    /* The golden tokens stepped on npu (cpu provider) and on host at exact: every row within
     * 1e-4; the info JSON names the backend and the provider. */
    uint32_t tokens[64];
    const size_t n_tokens = golden_tokens(tiny, tokens, 64);
    CHECK(n_tokens == 20, "golden.json: %zu tokens, want 20", n_tokens);
    npu_compile_ahead(tiny, tokens, n_tokens);
    npu_export_onnx(tiny, bad, tokens, n_tokens);
    packlm_open_options_init(&o, sizeof o);
    o.backend = PACKLM_BACKEND_NPU;
    o.provider = "cpu";
    EXPECT_STATUS(packlm_model_open(tiny, &o, &model), PACKLM_OK);
    if (!model) return;
    packlm_model *host = NULL;
    packlm_open_options_init(&o, sizeof o);
    o.backend = PACKLM_BACKEND_HOST;
    o.precision = PACKLM_PRECISION_EXACT;
    EXPECT_STATUS(packlm_model_open(tiny, &o, &host), PACKLM_OK);
    packlm_info info = {.size = sizeof info};
    EXPECT_STATUS(packlm_model_info(model, &info), PACKLM_OK);
    CHECK(info.n_vocab == 300 && info.precision == PACKLM_PRECISION_EXACT, "npu info: vocab %u precision %u", info.n_vocab, info.precision);
    char json[8192];
    size_t jn = 0;
    EXPECT_STATUS(packlm_model_info_json(model, json, sizeof json, &jn), PACKLM_OK);
    CHECK(strstr(json, "\"backend\":\"npu\"") && strstr(json, "\"device\":\"ONNX Runtime") && strstr(json, "cpu execution provider"),
          "npu info JSON names the backend and provider: %.300s", json);
    EXPECT_STATUS(packlm_model_info_json(host, json, sizeof json, &jn), PACKLM_OK);
    CHECK(strstr(json, "\"backend\":\"host\"") != NULL, "host info JSON: %.200s", json);
    packlm_session *ns = NULL, *hs = NULL;
    EXPECT_STATUS(packlm_session_new(model, NULL, &ns), PACKLM_OK);
    EXPECT_STATUS(packlm_session_new(host, NULL, &hs), PACKLM_OK);
    float a[300], b[300], worst = 0;
    size_t steps = 0;
    for (size_t i = 0; ns && hs && i < n_tokens; i++) {
        size_t na = 0, nb = 0;
        EXPECT_STATUS(packlm_step_into(ns, tokens[i], a, 300, &na), PACKLM_OK);
        EXPECT_STATUS(packlm_step_into(hs, tokens[i], b, 300, &nb), PACKLM_OK);
        steps += na == 300 && nb == 300;
        for (int j = 0; j < 300; j++) {
            float d = fabsf(a[j] - b[j]);
            if (!(d <= worst)) worst = d;
        }
    }
    CHECK(steps == n_tokens && worst <= 1e-4f, "npu vs host: %zu of %zu steps, max |diff| %g", steps, n_tokens, worst);
    fprintf(stderr, "note: npu vs host over %zu steps: max |diff| %g\n", steps, worst);
    packlm_session_free(ns);
    packlm_session_free(hs);
    packlm_model_free(host);
    packlm_model_free(model);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_api TINY_MODEL_DIR BAD_INPUT_DIR\n");
        return 2;
    }
    const char *tiny = argv[1], *bad = argv[2];

    CHECK(strcmp(packlm_version(), PACKLM_VERSION) == 0, "version %s vs header %s", packlm_version(), PACKLM_VERSION);
    CHECK(packlm_abi_version() == PACKLM_ABI_VERSION, "abi version");
    CHECK(strcmp(packlm_status_str(12345), "unknown status") == 0, "unknown status text");

    /* Bad packs: each a specific status and a message naming the file. */
    packlm_model *model = NULL;
    EXPECT_STATUS(packlm_model_open(join(bad, "no_such_folder"), NULL, &model), PACKLM_ERR_IO);
    expect_error_mentions("no_such_folder");
    EXPECT_STATUS(packlm_model_open(join(bad, "bad_config"), NULL, &model), PACKLM_ERR_FORMAT);
    expect_error_mentions("config.json");
    EXPECT_STATUS(packlm_model_open(join(bad, "trunc_st"), NULL, &model), PACKLM_ERR_FORMAT);
    expect_error_mentions("model.safetensors");
    EXPECT_STATUS(packlm_model_open(join(bad, "trunc.gguf"), NULL, &model), PACKLM_ERR_FORMAT);
    expect_error_mentions("trunc.gguf");
    CHECK(model == NULL, "out-parameter written on failure");

    /* NULL arguments. */
    EXPECT_STATUS(packlm_model_open(NULL, NULL, &model), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_model_open(tiny, NULL, NULL), PACKLM_ERR_NULL_ARGUMENT);

    /* Options with a size from another build are refused, not misread. */
    packlm_open_options opts;
    EXPECT_STATUS(packlm_open_options_default(&opts), PACKLM_OK);
    opts.size = sizeof opts + 8;
    EXPECT_STATUS(packlm_model_open(tiny, &opts, &model), PACKLM_ERR_INVALID_ARGUMENT);
    /* The GPU backend: required where PACKLM_REQUIRE_GPU is set (CI); elsewhere it may be
     * unavailable, with a message saying why. Its logits agree with the host's. */
    packlm_open_options_default(&opts);
    opts.backend = PACKLM_BACKEND_GPU;
    if (getenv("PACKLM_TEST_SKIP_GPU")) {
        fprintf(stderr, "note: GPU part skipped (PACKLM_TEST_SKIP_GPU=%s)\n", getenv("PACKLM_TEST_SKIP_GPU"));
    } else {
        packlm_status gs = packlm_model_open(tiny, &opts, &model);
        if (gs == PACKLM_ERR_BACKEND_UNAVAILABLE && !getenv("PACKLM_REQUIRE_GPU")) {
            fprintf(stderr, "note: no GPU here (%s)\n", packlm_last_error());
        } else {
            EXPECT_STATUS(gs, PACKLM_OK);
            if (model) {
                packlm_model *host = NULL;
                packlm_open_options ho;
                packlm_open_options_default(&ho);
                ho.precision = PACKLM_PRECISION_EXACT;
                EXPECT_STATUS(packlm_model_open(tiny, &ho, &host), PACKLM_OK);
                packlm_session *gs1 = NULL, *hs1 = NULL;
                EXPECT_STATUS(packlm_session_new(model, NULL, &gs1), PACKLM_OK);
                EXPECT_STATUS(packlm_session_new(host, NULL, &hs1), PACKLM_OK);
                float g[300], h[300];
                uint32_t three[3] = {1, 2, 3};
                EXPECT_STATUS(packlm_step_batch(gs1, three, 3, PACKLM_WANT_LAST, g), PACKLM_OK);
                EXPECT_STATUS(packlm_step_batch(hs1, three, 3, PACKLM_WANT_LAST, h), PACKLM_OK);
                float d = 0;
                for (int i = 0; i < 300; i++) d = fmaxf(d, fabsf(g[i] - h[i]));
                CHECK(d <= 1e-4f, "GPU vs host logits differ by %g", d);
                char json[8192];
                size_t jn = 0;
                EXPECT_STATUS(packlm_model_info_json(model, json, sizeof json, &jn), PACKLM_OK);
                CHECK(strstr(json, "\"backend\":\"gpu\"") && strstr(json, "\"device\":\""), "info JSON names the backend and adapter: %s", json);
                packlm_session_free(gs1);
                packlm_session_free(hs1);
                packlm_model_free(host);
                packlm_model_free(model);
                model = NULL;
            }
        }
    }
    npu_backend(tiny, bad);
    packlm_open_options_default(&opts);
    opts.threads = 2;
    int one = 1;
    EXPECT_STATUS(packlm_set_log_callback(on_log, &one), PACKLM_OK);
    EXPECT_STATUS(packlm_model_open(tiny, &opts, &model), PACKLM_OK);
    EXPECT_STATUS(packlm_set_log_callback(NULL, NULL), PACKLM_OK);
    CHECK(log_calls >= 1 && strstr(log_last, "opened"), "log callback: %d calls, last \"%s\"", log_calls, log_last);
    if (!model) { fprintf(stderr, "cannot continue without a model\n"); return 1; }

    /* Threads: more than the maximum is refused, not clamped; a valid count is accepted. */
    EXPECT_STATUS(packlm_model_set_threads(model, 257), PACKLM_ERR_LIMIT_EXCEEDED);
    expect_error_mentions("257");
    EXPECT_STATUS(packlm_model_set_threads(NULL, 1), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_model_set_threads(model, 1), PACKLM_OK);
    EXPECT_STATUS(packlm_model_set_threads(model, 2), PACKLM_OK);

    packlm_info info = {.size = sizeof info};
    EXPECT_STATUS(packlm_model_info(model, &info), PACKLM_OK);
    CHECK(info.n_vocab == 300 && info.n_layers >= 2 && info.bos == 0, "info: vocab %u layers %u bos %d", info.n_vocab, info.n_layers, info.bos);
    uint32_t widths[64];
    size_t n = 0;
    EXPECT_STATUS(packlm_model_kv_widths(model, widths, 64, &n), PACKLM_OK);
    CHECK(n == info.n_layers && widths[0] > 0, "kv widths");

    /* Tokenize: too small a buffer gives the size needed and writes nothing. */
    const char *text = "Hello world";
    uint32_t toks[64];
    size_t need = 0;
    EXPECT_STATUS(packlm_tokenize(model, text, strlen(text), PACKLM_TOKENIZE_ADD_SPECIAL, toks, 1, &need), PACKLM_ERR_BUFFER_TOO_SMALL);
    CHECK(need > 1 && need < 64, "needed size %zu", need);
    size_t n_tok = 0;
    EXPECT_STATUS(packlm_tokenize(model, text, strlen(text), PACKLM_TOKENIZE_ADD_SPECIAL, toks, 64, &n_tok), PACKLM_OK);
    CHECK(n_tok == need && toks[0] == 0, "tokenize: %zu tokens, first %u", n_tok, toks[0]);
    EXPECT_STATUS(packlm_tokenize(model, NULL, 3, 0, toks, 64, &n_tok), PACKLM_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(packlm_tokenize(model, "\xff\xfe", 2, 0, toks, 64, &n_tok), PACKLM_ERR_UTF8);

    char out[256];
    size_t n_out = 0;
    EXPECT_STATUS(packlm_detokenize(model, toks + 1, need - 1, 0, out, 3, &n_out), PACKLM_ERR_BUFFER_TOO_SMALL);
    CHECK(n_out == strlen(text) + 1, "detokenize needs %zu", n_out);
    EXPECT_STATUS(packlm_detokenize(model, toks + 1, need - 1, 0, out, sizeof out, &n_out), PACKLM_OK);
    CHECK(strcmp(out, text) == 0 && n_out == strlen(text), "detokenize gave \"%s\"", out);
    uint32_t bad_tok = 100000;
    EXPECT_STATUS(packlm_detokenize(model, &bad_tok, 1, 0, out, sizeof out, &n_out), PACKLM_ERR_TOKEN_OUT_OF_RANGE);

    /* Sessions: step_batch, then step; bad calls leave the session as it was. */
    packlm_session *s = NULL, *fresh = NULL;
    EXPECT_STATUS(packlm_session_new(model, NULL, &s), PACKLM_OK);
    EXPECT_STATUS(packlm_session_new(model, NULL, &fresh), PACKLM_OK);
    float *logits = malloc(sizeof(float) * info.n_vocab * 64);
    float *want = malloc(sizeof(float) * info.n_vocab);
    EXPECT_STATUS(packlm_step_batch(s, toks, n_tok, PACKLM_WANT_LAST, logits), PACKLM_OK);
    size_t past = 0;
    packlm_session_n_past(s, &past);
    CHECK(past == n_tok, "n_past %zu after %zu tokens", past, n_tok);

    EXPECT_STATUS(packlm_step(s, info.n_vocab, logits), PACKLM_ERR_TOKEN_OUT_OF_RANGE);
    expect_error_mentions("outside the vocabulary");
    uint32_t mixed[2] = {5, 999999};
    EXPECT_STATUS(packlm_step_batch(s, mixed, 2, PACKLM_WANT_ALL, logits), PACKLM_ERR_TOKEN_OUT_OF_RANGE);
    EXPECT_STATUS(packlm_step_batch(s, toks, 2, 7, logits), PACKLM_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(packlm_step(NULL, 5, logits), PACKLM_ERR_NULL_ARGUMENT);
    packlm_session_n_past(s, &past);
    CHECK(past == n_tok, "n_past changed by failed calls: %zu", past);

    /* The session still works, and gives what a session that saw only good tokens gives. */
    EXPECT_STATUS(packlm_step(s, 7, logits), PACKLM_OK);
    for (size_t i = 0; i < n_tok; i++) packlm_step(fresh, toks[i], NULL);
    EXPECT_STATUS(packlm_step(fresh, 7, want), PACKLM_OK);
    CHECK(memcmp(logits, want, sizeof(float) * info.n_vocab) == 0, "logits after failed calls differ from a fresh session");
    int finite = 1;
    for (uint32_t i = 0; i < info.n_vocab; i++) finite &= isfinite(want[i]);
    CHECK(finite, "non-finite logits");

    /* Abort: a raised flag stops passes with ABORTED and leaves the session as it was. */
    packlm_abort *ab = NULL;
    EXPECT_STATUS(packlm_session_abort_handle(fresh, &ab), PACKLM_OK);
    size_t before = 0, after = 0;
    packlm_session_n_past(fresh, &before);
    EXPECT_STATUS(packlm_abort_set(ab), PACKLM_OK);
    EXPECT_STATUS(packlm_step(fresh, 9, want), PACKLM_ERR_ABORTED);
    packlm_session_n_past(fresh, &after);
    CHECK(after == before, "aborted step changed n_past %zu -> %zu", before, after);
    EXPECT_STATUS(packlm_abort_clear(ab), PACKLM_OK);
    EXPECT_STATUS(packlm_step(fresh, 9, want), PACKLM_OK);
    EXPECT_STATUS(packlm_step(s, 9, logits), PACKLM_OK);
    CHECK(memcmp(logits, want, sizeof(float) * info.n_vocab) == 0, "logits after an aborted step differ");
    packlm_abort_free(ab);
    packlm_abort_free(NULL);

    /* Context overflow is refused, and the session is kept. */
    packlm_session *small = NULL;
    packlm_session_options so = {.size = sizeof so, .n_ctx = 4};
    EXPECT_STATUS(packlm_session_new(model, &so, &small), PACKLM_OK);
    EXPECT_STATUS(packlm_step_batch(small, toks, 5 <= n_tok ? 5 : n_tok, PACKLM_WANT_LAST, logits), n_tok >= 5 ? PACKLM_ERR_CONTEXT_OVERFLOW : PACKLM_OK);

    /* A model without a chat template says so. */
    packlm_chat_message msg = {.role = "user", .content = "hi"};
    EXPECT_STATUS(packlm_chat_apply(model, &msg, 1, 1, out, sizeof out, &n_out), PACKLM_ERR_UNSUPPORTED);

    /* Free in any order; NULL is a no-op. The session keeps the model alive. */
    packlm_model_free(model);
    EXPECT_STATUS(packlm_step(s, 10, logits), PACKLM_OK);
    packlm_session_free(s);
    packlm_session_free(fresh);
    packlm_session_free(small);
    packlm_session_free(NULL);
    packlm_model_free(NULL);
    free(logits);
    free(want);

    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
