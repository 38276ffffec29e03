/* A context's performance counts (llama_perf_context, _print, _reset) on libllama.so with
 * SmolLM2-135M-Instruct, checked against llama.cpp's llama-context.cpp (synchronize,
 * perf_get_data, perf_reset, llama_perf_context_print):
 *   - a decode of one token is one eval (n_eval), a larger one adds its tokens to n_p_eval;
 *     both are given as at least 1; n_reused is 0 (no ggml graphs);
 *   - with no_perf (the default) the eval times stay 0; without it they grow;
 *   - t_start_ms is the model's load start on ggml_time_us's clock, and t_load_ms becomes, at
 *     the first evaluation, the time from that start to the end of that evaluation;
 *   - llama_perf_context_reset sets t_start_ms to now and the evals to 0 (given as 1);
 *   - llama_perf_context_print logs llama.cpp's lines, formatted as its printf formats them.
 * And the load's progress callback (llama.h: values from 0.0 to 1.0; false aborts the load):
 * called several times, first 0 and last 1, each value above the one before; false at the
 * first or second call stops the load there (no later call) and gives NULL with llama.cpp's
 * "cancelled model load".
 *
 * And llama_model_load_from_file_ptr / llama_adapter_lora_init_from_file_ptr: a FILE * of the
 * GGUF at position 0 gives the model (the adapter) its path gives, logits bit for bit, and
 * leaves the stream where it was; at another position (llama.h reads "from the current
 * position", a GGUF embedded in a larger file, which packlm does not map), a pipe, or NULL:
 * NULL and a log line saying which.
 *
 *   perf_load MODEL.gguf LORA.gguf      (LORA.gguf: an adapter of MODEL, tests/llama/make_lora.py)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ggml.h"
#include "llama.h"
#include "log_capture.h"

#define CHECK(cond) do { if (!(cond)) check_failed(#cond, __FILE__, __LINE__); } while (0)

static const char *PROMPT = "The capital of France is";
static llama_token prompt[32];
static int n_prompt;

static struct llama_context *context(struct llama_model *m, bool no_perf) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.no_perf = no_perf;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    CHECK(ctx != NULL);
    return ctx;
}

static void step(struct llama_context *ctx, llama_token t) {
    CHECK(llama_decode(ctx, llama_batch_get_one(&t, 1)) == 0);
}

static void perf_counts(const char *model_path) {
    double t0 = 1e-3 * ggml_time_us();
    struct llama_model *model = llama_model_load_from_file(model_path, llama_model_default_params());
    double t1 = 1e-3 * ggml_time_us();
    CHECK(model != NULL);
    n_prompt = llama_tokenize(llama_model_get_vocab(model), PROMPT, (int32_t)strlen(PROMPT), prompt, 32, false, true);
    CHECK(n_prompt == 5);

    /* Default params: no_perf. Before any decode: the evals given as 1, no time. */
    struct llama_context *ctx = context(model, true);
    struct llama_perf_context_data d = llama_perf_context(ctx);
    CHECK(d.n_p_eval == 1 && d.n_eval == 1 && d.n_reused == 0 && d.t_p_eval_ms == 0 && d.t_eval_ms == 0);
    CHECK(d.t_start_ms >= t0 - 0.01 && d.t_start_ms <= t1 + 0.01);
    CHECK(d.t_load_ms >= 0 && d.t_start_ms + d.t_load_ms <= t1 + 0.01);
    /* The first evaluation: t_load_ms runs from the load's start to its end. */
    double t2 = 1e-3 * ggml_time_us();
    CHECK(llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) == 0);
    double t3 = 1e-3 * ggml_time_us();
    d = llama_perf_context(ctx);
    CHECK(d.t_start_ms + d.t_load_ms >= t2 - 0.01 && d.t_start_ms + d.t_load_ms <= t3 + 0.01);
    CHECK(d.n_p_eval == n_prompt && d.n_eval == 1);
    for (int i = 0; i < 3; i++) step(ctx, prompt[i]);
    d = llama_perf_context(ctx);
    CHECK(d.n_p_eval == n_prompt && d.n_eval == 3 && d.t_p_eval_ms == 0 && d.t_eval_ms == 0);
    /* Two tokens in one decode are prompt evals; a failed decode counts nothing. */
    llama_token two[2] = {prompt[0], prompt[1]};
    CHECK(llama_decode(ctx, llama_batch_get_one(two, 2)) == 0);
    llama_token bad = -5;
    CHECK(llama_decode(ctx, llama_batch_get_one(&bad, 1)) != 0);
    d = llama_perf_context(ctx);
    CHECK(d.n_p_eval == n_prompt + 2 && d.n_eval == 3);

    /* llama_perf_context_print: llama.cpp's lines. */
    log_reset();
    llama_perf_context_print(ctx);
    char want[512];
    snprintf(want, sizeof want, "llama_perf_context_print:        load time = %10.2f ms\n", d.t_load_ms);
    CHECK(logged(want));
    snprintf(want, sizeof want, "llama_perf_context_print: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
             d.t_p_eval_ms, d.n_p_eval, d.t_p_eval_ms / d.n_p_eval, 1e3 / d.t_p_eval_ms * d.n_p_eval);
    CHECK(logged(want));
    snprintf(want, sizeof want, "llama_perf_context_print:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n",
             d.t_eval_ms, d.n_eval, d.t_eval_ms / d.n_eval, 1e3 / d.t_eval_ms * d.n_eval);
    CHECK(logged(want));
    snprintf(want, sizeof want, "/ %5d tokens\n", d.n_p_eval + d.n_eval);
    CHECK(logged("llama_perf_context_print:       total time = ") && logged(want));
    snprintf(want, sizeof want, "llama_perf_context_print:    graphs reused = %10d\n", 0);
    CHECK(logged(want));

    /* Reset: the clock restarts now, the evals are 0 (given as 1). */
    double t4 = 1e-3 * ggml_time_us();
    llama_perf_context_reset(ctx);
    double t5 = 1e-3 * ggml_time_us();
    d = llama_perf_context(ctx);
    CHECK(d.t_start_ms >= t4 - 0.01 && d.t_start_ms <= t5 + 0.01);
    CHECK(d.n_p_eval == 1 && d.n_eval == 1 && d.t_p_eval_ms == 0 && d.t_eval_ms == 0);
    step(ctx, prompt[2]);
    CHECK(llama_perf_context(ctx).n_eval == 1 && llama_perf_context(ctx).n_p_eval == 1);
    llama_free(ctx);

    /* no_perf false: the times are measured. */
    ctx = context(model, false);
    CHECK(llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) == 0);
    step(ctx, prompt[0]);
    d = llama_perf_context(ctx);
    CHECK(d.n_p_eval == n_prompt && d.n_eval == 1 && d.t_p_eval_ms > 0 && d.t_eval_ms > 0);
    llama_free(ctx);
    llama_model_free(model);
    printf("perf: n_p_eval / n_eval per decode, times under no_perf, load time at the first eval, reset, print\n");
}

/* ---- the load progress callback (llama.h: "Called with a progress value between 0.0 and
 * 1.0"; returning false aborts the load) ---- */

static float seen[4096];
static int n_seen;
static int stop_at;

static bool record(float p, void *data) {
    CHECK(data == &n_seen);
    if (n_seen < 4096) seen[n_seen] = p;
    n_seen++;
    return n_seen != stop_at;
}

static void progress(const char *model_path) {
    struct llama_model_params mp = llama_model_default_params();
    mp.progress_callback = record;
    mp.progress_callback_user_data = &n_seen;
    n_seen = 0;
    stop_at = -1;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    CHECK(model != NULL);
    /* SmolLM2 has 30 layers: 0, the files read, one value per layer, 1 (packlm's points). */
    CHECK(n_seen >= 3 && n_seen <= 4096);
    CHECK(seen[0] == 0.0f && seen[n_seen - 1] == 1.0f);
    for (int i = 1; i < n_seen; i++) CHECK(seen[i] > seen[i - 1] && seen[i] <= 1.0f);
    int n_full = n_seen;
    llama_model_free(model);
    /* false at the second call: the load stops there and gives NULL. */
    for (int k = 1; k <= 2; k++) {
        n_seen = 0;
        stop_at = k;
        log_reset();
        CHECK(llama_model_load_from_file(model_path, mp) == NULL);
        CHECK(n_seen == k);
        CHECK(logged("cancelled model load"));
    }
    printf("progress: %d values from 0 to 1, increasing; false cancels (NULL)\n", n_full);
}


/* ---- a model and a LoRA adapter from a FILE * ---- */

static void last_logits(struct llama_model *m, struct llama_adapter_lora *lora, float *out) {
    struct llama_context *ctx = context(m, true);
    if (lora) {
        float scale = 1.0f;
        CHECK(llama_set_adapters_lora(ctx, &lora, 1, &scale) == 0);
    }
    CHECK(llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) == 0);
    memcpy(out, llama_get_logits_ith(ctx, -1), sizeof(float) * 49152);
    llama_free(ctx);
}

static void file_ptr(const char *model_path, const char *lora_path) {
    static float a[49152], b[49152];
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *by_path = llama_model_load_from_file(model_path, mp);
    CHECK(by_path != NULL && llama_vocab_n_tokens(llama_model_get_vocab(by_path)) == 49152);
    FILE *f = fopen(model_path, "rb");
    CHECK(f != NULL);
    struct llama_model *by_file = llama_model_load_from_file_ptr(f, mp);
    CHECK(by_file != NULL);
    CHECK(ftell(f) == 0);
    last_logits(by_path, NULL, a);
    last_logits(by_file, NULL, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(llama_model_n_params(by_file) == llama_model_n_params(by_path));
    /* Not at its start (a GGUF embedded in a larger file): refused. */
    CHECK(fseek(f, 4, SEEK_SET) == 0);
    log_reset();
    CHECK(llama_model_load_from_file_ptr(f, mp) == NULL);
    CHECK(logged("llama_model_load_from_file_ptr") && logged("position 4"));
    /* A pipe: refused. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    FILE *p = fdopen(fds[0], "rb");
    CHECK(p != NULL);
    log_reset();
    CHECK(llama_model_load_from_file_ptr(p, mp) == NULL);
    CHECK(logged("not a regular file"));
    log_reset();
    CHECK(llama_model_load_from_file_ptr(NULL, mp) == NULL);
    CHECK(logged("file is NULL"));

    /* The adapter: the same adapter as by its path, logits bit for bit. */
    struct llama_adapter_lora *lora_by_path = llama_adapter_lora_init(by_path, lora_path);
    CHECK(lora_by_path != NULL);
    FILE *lf = fopen(lora_path, "rb");
    CHECK(lf != NULL);
    struct llama_adapter_lora *lora_file = llama_adapter_lora_init_from_file_ptr(by_path, lf);
    CHECK(lora_file != NULL && ftell(lf) == 0);
    CHECK(llama_adapter_meta_count(lora_file) == llama_adapter_meta_count(lora_by_path));
    last_logits(by_path, lora_by_path, a);
    last_logits(by_path, lora_file, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(fseek(lf, 8, SEEK_SET) == 0);
    log_reset();
    CHECK(llama_adapter_lora_init_from_file_ptr(by_path, lf) == NULL);
    CHECK(logged("llama_adapter_lora_init_from_file_ptr") && logged("position 8"));
    llama_adapter_lora_free(lora_file);
    llama_adapter_lora_free(lora_by_path);
    fclose(lf);
    fclose(p);
    close(fds[1]);
    fclose(f);
    llama_model_free(by_file);
    llama_model_free(by_path);
    printf("file_ptr: a model and a LoRA adapter from a FILE * at position 0, as by their paths; other positions, pipes, NULL refused\n");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: perf_load MODEL.gguf LORA.gguf\n");
        return 2;
    }
    llama_log_set(on_log, NULL);
    llama_backend_init();
    perf_counts(argv[1]);
    progress(argv[1]);
    file_ptr(argv[1], argv[2]);
    return 0;
}
