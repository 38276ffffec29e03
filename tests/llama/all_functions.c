/* Every function llama-cpp-python 0.3.36's llama.h declares (LLAMA_API), called from C on
 * libllama.so with meaningful arguments, and each result checked against what llama.h
 * documents and llama.cpp (the sdist's vendor/llama.cpp/src) returns: a count, a token, a
 * string, a return code, bytes equal to another path's. SmolLM2-135M-Instruct (a GGUF) is the
 * real model; the tiny llama fixture folder serves the cheap calls. The functions this library
 * does not serve (README.md, llama/src/unsupported.rs) must give llama.cpp's failure value and
 * a log line naming them, and must not crash.
 *
 *   all_functions MODEL.gguf TINY_FOLDER WORKDIR
 *
 * WORKDIR holds lora.gguf and alora.gguf (tests/llama/make_lora.py for MODEL: a LoRA of rank 4
 * and an aLoRA) and takes the files the program writes (state and session files).
 * It prints one line per group of functions and exits 0, or 1 at the first failed check with
 * "FAIL: <function>: <what>" and the library's log lines since the group (or the last refused
 * call) began.
 *
 * Completeness. tests/llama/examples.sh lists the functions llama.h declares (the name of each
 * LLAMA_API declaration, read from the header; the list's length must be the literal 255 of
 * 0.3.36, so that a listing that silently loses one fails), compiles this file to an object and
 * requires each of them among the object's undefined symbols (nm -u). The compiler emits such a
 * reference only for a function the code calls or takes the address of, and this file takes no
 * llama function's address: a name
 * in a comment, a string or a CHECK's message does not count, as it would for a grep of the
 * text, and a table of addresses would count functions never called. A function a new llama.h
 * adds fails the build until it is called here.
 *
 * Known differences. A check of llama.cpp's behaviour that this library does not meet yet is a
 * DEVIATION: it prints "deviation: ..." and the program goes on; it fails once the library
 * behaves as llama.cpp (the DEVIATION must then become a CHECK), and with ALL_FUNCTIONS_STRICT=1
 * every deviation fails. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "log_capture.h"

/* The deprecated names are part of llama.h's API: calling them is the point. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* ---- checks ------------------------------------------------------------------------------ */

/* The library's log lines since the current group (or refused call) began: log_capture.h,
 * with the lines counted in n_log_calls. */
static int n_log_calls;
static bool strict;
static int n_deviations;

static void fail(const char *fn, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: %s: ", fn);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (tests/llama/all_functions.c:%d)\n", line);
    if (log_len) fprintf(stderr, "library log since the group began:\n%s", log_text);
    exit(1);
}

#define CHECK(fn, cond) do { if (!(cond)) fail(#fn, __LINE__, "%s", #cond); } while (0)
#define CHECKF(fn, cond, ...) do { if (!(cond)) fail(#fn, __LINE__, __VA_ARGS__); } while (0)
/* A refused call: its failure value (cond) and a log line naming it. */
#define REFUSED(fn, cond) do { CHECK(fn, cond); CHECKF(fn, logged(#fn), "no log line names it"); } while (0)
#define DEVIATION(fn, cond, why) deviation(#fn, __LINE__, (cond), #cond, why)

/* The current group's deviations, printed under its line. */
static char deviations[4096];

/* Unused while the library shows no deviation; kept for the next one. */
__attribute__((unused)) static void deviation(const char *fn, int line, bool holds, const char *cond, const char *why) {
    if (holds) fail(fn, line, "now holds: %s; make this DEVIATION a CHECK", cond);
    if (strict) fail(fn, line, "%s (ALL_FUNCTIONS_STRICT)", why);
    n_deviations++;
    size_t used = strlen(deviations);
    snprintf(deviations + used, sizeof deviations - used, "  deviation: %s: %s\n", fn, why);
}

static void group_done(const char *what) {
    printf("%s\n%s", what, deviations);
    fflush(stdout);
    deviations[0] = 0;
    log_reset();
}

static bool str_is(const char *s, const char *want) {
    return s != NULL && strcmp(s, want) == 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static const char *PROMPT = "The capital of France is";
#define N_PROMPT 5         /* "The", " capital", " of", " France", " is" */
#define PARIS 7042         /* SmolLM2's "ĠParis" */
#define N_EMBD 576
#define N_VOCAB 49152

static char work_dir[512];

static const char *work_path(const char *name) {
    static char path[4][640];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", work_dir, name);
    return path[k];
}

static bool file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int tokenize(const struct llama_vocab *v, const char *text, llama_token *out, int cap) {
    int n = llama_tokenize(v, text, (int32_t)strlen(text), out, cap, false, true);
    CHECKF(llama_tokenize, n >= 0, "'%s' gave %d", text, n);
    return n;
}

static llama_token argmax(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (row[i] > row[best]) best = i;
    return best;
}

static void put(struct llama_batch *b, llama_token t, llama_pos p, llama_seq_id s, bool out) {
    b->token[b->n_tokens] = t;
    b->pos[b->n_tokens] = p;
    b->n_seq_id[b->n_tokens] = 1;
    b->seq_id[b->n_tokens][0] = s;
    b->logits[b->n_tokens] = out;
    b->n_tokens++;
}

static struct llama_context *new_context(struct llama_model *m, uint32_t n_ctx, uint32_t n_seq) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    CHECK(llama_init_from_model, ctx != NULL);
    return ctx;
}

/* Decodes the prompt's tokens into sequence 0 of an empty context; its last logits row. */
static float *decode_prompt(struct llama_context *ctx, llama_token *toks) {
    CHECK(llama_decode, llama_decode(ctx, llama_batch_get_one(toks, N_PROMPT)) == 0);
    float *row = llama_get_logits_ith(ctx, -1);
    CHECK(llama_get_logits_ith, row != NULL);
    return row;
}

/* ---- global functions -------------------------------------------------------------------- */

static bool progress_seen_1;
static bool progress_yes(float progress, void *data) {
    (void)data;
    if (progress >= 1.0f) progress_seen_1 = true;
    return true;
}
static bool progress_no(float progress, void *data) {
    (void)progress;
    (void)data;
    return false;
}

static void globals(void) {
    const char *version = llama_version();
    CHECK(llama_version, version != NULL && version[0] != 0);

    /* llama.cpp's defaults (llama-model.cpp, llama-context.cpp, llama.cpp, llama-quant.cpp). */
    struct llama_model_params mp = llama_model_default_params();
    CHECK(llama_model_default_params, mp.devices == NULL && mp.tensor_buft_overrides == NULL && mp.n_gpu_layers == -1 &&
                                          mp.split_mode == LLAMA_SPLIT_MODE_LAYER && mp.main_gpu == 0 && mp.tensor_split == NULL &&
                                          mp.progress_callback == NULL && mp.kv_overrides == NULL && !mp.vocab_only &&
                                          !mp.check_tensors && mp.use_extra_bufts && !mp.no_host && !mp.no_alloc && !mp.load_mtp);
    CHECK(llama_model_default_params, mp.load_mode == LLAMA_LOAD_MODE_AUTO && mp.lazy_mode == LLAMA_LAZY_MODE_AUTO);
    struct llama_context_params cp = llama_context_default_params();
    CHECK(llama_context_default_params, cp.n_ctx == 512 && cp.n_batch == 2048 && cp.n_ubatch == 512 && cp.n_seq_max == 1 &&
                                            cp.n_rs_seq == 0 && cp.n_outputs_max == 0 && cp.n_threads == GGML_DEFAULT_N_THREADS &&
                                            cp.n_threads_batch == GGML_DEFAULT_N_THREADS && cp.ctx_type == LLAMA_CONTEXT_TYPE_DEFAULT &&
                                            cp.rope_scaling_type == LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED &&
                                            cp.pooling_type == LLAMA_POOLING_TYPE_UNSPECIFIED &&
                                            cp.attention_type == LLAMA_ATTENTION_TYPE_UNSPECIFIED &&
                                            cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_AUTO && cp.rope_freq_base == 0.0f &&
                                            cp.yarn_ext_factor == -1.0f && cp.type_k == GGML_TYPE_F16 && cp.type_v == GGML_TYPE_F16 &&
                                            cp.abort_callback == NULL && !cp.embeddings && cp.offload_kqv && cp.no_perf &&
                                            cp.op_offload && cp.swa_full && !cp.kv_unified && cp.samplers == NULL &&
                                            cp.n_samplers == 0 && cp.ctx_other == NULL);
    CHECK(llama_context_default_params, cp.n_outputs_max_per_seq == 1);
    CHECK(llama_sampler_chain_default_params, llama_sampler_chain_default_params().no_perf);
    struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    CHECK(llama_model_quantize_default_params, qp.nthread == 0 && qp.ftype == LLAMA_FTYPE_MOSTLY_Q8_0 &&
                                                   qp.output_tensor_type == GGML_TYPE_COUNT &&
                                                   qp.token_embedding_type == GGML_TYPE_COUNT && !qp.allow_requantize &&
                                                   qp.quantize_output_tensor && !qp.only_copy && !qp.pure && !qp.dry_run &&
                                                   qp.imatrix == NULL && qp.kv_overrides == NULL && qp.max_buf_size > 0);

    llama_numa_init(GGML_NUMA_STRATEGY_DISABLED);
    int64_t t0 = llama_time_us();
    int64_t t1 = llama_time_us();
    CHECK(llama_time_us, t0 > 0 && t1 >= t0);
    CHECK(llama_max_devices, llama_max_devices() >= 1);
    /* LLAMA_MAX_SEQ, as this library's contexts take n_seq_max up to 256 (and refuse 257 below). */
    CHECK(llama_max_parallel_sequences, llama_max_parallel_sequences() == 256);
    CHECK(llama_max_tensor_buft_overrides, llama_max_tensor_buft_overrides() == 4096);
    /* This library maps the weights and has no RPC backend. GPU offload and mlock are per
     * machine and platform in llama.cpp: either answer, but a bool's. */
    CHECK(llama_supports_mmap, llama_supports_mmap());
    CHECK(llama_supports_rpc, !llama_supports_rpc());
    bool gpu = llama_supports_gpu_offload(), mlock = llama_supports_mlock();
    CHECK(llama_supports_gpu_offload, gpu == true || gpu == false);
    CHECK(llama_supports_mlock, mlock == true || mlock == false);
    const char *info = llama_print_system_info();
    CHECK(llama_print_system_info, info != NULL && info[0] != 0);

    CHECK(llama_ftype_name, str_is(llama_ftype_name(LLAMA_FTYPE_MOSTLY_Q4_1), "Q4_1"));
    CHECK(llama_ftype_name, str_is(llama_ftype_name(LLAMA_FTYPE_MOSTLY_Q4_K_M), "Q4_K - Medium"));
    CHECK(llama_ftype_name, str_is(llama_ftype_name(LLAMA_FTYPE_GUESSED | LLAMA_FTYPE_MOSTLY_F16), "(guessed) F16"));
    CHECK(llama_flash_attn_type_name, str_is(llama_flash_attn_type_name(LLAMA_FLASH_ATTN_TYPE_AUTO), "auto"));
    CHECK(llama_flash_attn_type_name, str_is(llama_flash_attn_type_name(LLAMA_FLASH_ATTN_TYPE_DISABLED), "disabled"));
    CHECK(llama_flash_attn_type_name, str_is(llama_flash_attn_type_name(LLAMA_FLASH_ATTN_TYPE_ENABLED), "enabled"));
    static const struct { enum llama_load_mode mode; const char *name; } modes[] = {
        {LLAMA_LOAD_MODE_AUTO, "auto"},   {LLAMA_LOAD_MODE_NONE, "none"},        {LLAMA_LOAD_MODE_MMAP, "mmap"},
        {LLAMA_LOAD_MODE_MLOCK, "mlock"}, {LLAMA_LOAD_MODE_MMAP_MLOCK, "mmap+mlock"}, {LLAMA_LOAD_MODE_DIRECT_IO, "dio"},
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        CHECKF(llama_load_mode_name, str_is(llama_load_mode_name(modes[i].mode), modes[i].name), "mode %d", modes[i].mode);
        CHECKF(llama_load_mode_from_str, llama_load_mode_from_str(modes[i].name) == modes[i].mode, "'%s'", modes[i].name);
    }
    CHECK(llama_model_meta_key_str, str_is(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_SEQUENCE), "general.sampling.sequence"));
    CHECK(llama_model_meta_key_str, str_is(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_TEMP), "general.sampling.temp"));
    CHECK(llama_model_meta_key_str, str_is(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT_ETA), "general.sampling.mirostat_eta"));

    /* llama.cpp writes split_no + 1 (llama.h's comment shows split_no itself). */
    char path[128];
    CHECK(llama_split_path, llama_split_path(path, sizeof path, "/models/ggml-model-q4_0", 2, 4) == 43);
    CHECK(llama_split_path, str_is(path, "/models/ggml-model-q4_0-00003-of-00004.gguf"));
    CHECK(llama_split_path, llama_split_path(path, 8, "abc", 0, 1) == 0);
    CHECK(llama_split_prefix, llama_split_prefix(path, sizeof path, "/models/ggml-model-q4_0-00002-of-00004.gguf", 1, 4) == 23);
    CHECK(llama_split_prefix, str_is(path, "/models/ggml-model-q4_0"));
    CHECK(llama_split_prefix, llama_split_prefix(path, sizeof path, "/models/ggml-model-q4_0-00002-of-00004.gguf", 2, 4) == 0);

    /* llama_log_get gives what llama_log_set set; after NULL, the default (never NULL). */
    ggml_log_callback cb = NULL;
    void *ud = NULL;
    llama_log_get(&cb, &ud);
    CHECK(llama_log_get, cb == on_log && ud == &n_log_calls);
    llama_log_set(NULL, NULL);
    llama_log_get(&cb, &ud);
    CHECK(llama_log_get, cb != NULL && cb != on_log);
    llama_log_set(on_log, &n_log_calls);
    group_done("globals: version, the four default params, backend/numa init, time, limits, supports_*, system info, enum names, split paths, log get/set");
}

/* ---- models ------------------------------------------------------------------------------ */

static void tiny_model(const char *tiny_path) {
    struct llama_model_params mp = llama_model_default_params();
    mp.progress_callback = progress_yes;
    struct llama_model *tiny = llama_model_load_from_file(tiny_path, mp);
    CHECK(llama_model_load_from_file, tiny != NULL);
    CHECK(llama_model_load_from_file, progress_seen_1);
    /* tests/fixtures/tiny/llama/config.json */
    CHECK(llama_model_n_ctx_train, llama_model_n_ctx_train(tiny) == 128);
    CHECK(llama_model_n_embd, llama_model_n_embd(tiny) == 64);
    CHECK(llama_model_n_layer, llama_model_n_layer(tiny) == 2);
    CHECK(llama_model_n_head, llama_model_n_head(tiny) == 4);
    CHECK(llama_model_n_head_kv, llama_model_n_head_kv(tiny) == 2);
    CHECK(llama_model_rope_type, llama_model_rope_type(tiny) == LLAMA_ROPE_TYPE_NORM);
    const struct llama_vocab *tv = llama_model_get_vocab(tiny);
    CHECK(llama_vocab_n_tokens, llama_vocab_n_tokens(tv) == 300);
    CHECK(llama_vocab_bos, llama_vocab_bos(tv) == 0);
    CHECK(llama_vocab_eos, llama_vocab_eos(tv) == 1);
    log_reset();
    /* A folder states no general.file_type: -1 and a log line (README). */
    REFUSED(llama_model_ftype, (int)llama_model_ftype(tiny) == -1);
    /* n_ctx 0 is the model's; a longer one than the model's is refused (README). */
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 0;
    struct llama_context *ctx = llama_init_from_model(tiny, cp);
    CHECK(llama_init_from_model, ctx != NULL && llama_n_ctx(ctx) == 128 && llama_get_model(ctx) == tiny);
    llama_free(ctx);
    cp.n_ctx = 256;
    log_reset();
    REFUSED(llama_init_from_model, llama_init_from_model(tiny, cp) == NULL);
    /* Embeddings with a pooling this library does not compute (RANK) are refused (README). */
    cp.n_ctx = 0;
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_RANK;
    log_reset();
    REFUSED(llama_init_from_model, llama_init_from_model(tiny, cp) == NULL);
    llama_model_free(tiny);

    /* A vocabulary-only load serves the vocabulary. */
    mp = llama_model_default_params();
    mp.vocab_only = true;
    tiny = llama_model_load_from_file(tiny_path, mp);
    CHECK(llama_model_load_from_file, tiny != NULL && llama_vocab_n_tokens(llama_model_get_vocab(tiny)) == 300);
    llama_model_free(tiny);

    /* The deprecated loader and free. */
    struct llama_model *old = llama_load_model_from_file(tiny_path, llama_model_default_params());
    CHECK(llama_load_model_from_file, old != NULL && llama_model_n_layer(old) == 2);
    llama_free_model(old);

    /* llama.h: a progress callback returning false aborts the load. */
    mp.progress_callback = progress_no;
    struct llama_model *stopped = llama_model_load_from_file(tiny_path, mp);
    CHECK(llama_model_load_from_file, stopped == NULL && logged("cancelled model load"));

    log_reset();
    REFUSED(llama_model_load_from_file, llama_model_load_from_file(work_path("no-such-model.gguf"), llama_model_default_params()) == NULL);
    /* kv_overrides change the model: refused (README). */
    struct llama_model_kv_override kv[2];
    memset(kv, 0, sizeof kv);
    kv[0].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    strcpy(kv[0].key, "llama.context_length");
    kv[0].val_i64 = 64;
    mp = llama_model_default_params();
    mp.kv_overrides = kv;
    log_reset();
    REFUSED(llama_model_load_from_file, llama_model_load_from_file(tiny_path, mp) == NULL);
}

static void model_facts(struct llama_model *model) {
    /* The sums over the GGUF's tensors of their bytes and elements, as gguf-py's reader gives
     * them (and llama.cpp's llama_model_size / _n_params, recorded from llama-cpp-python 0.3.36). */
    CHECK(llama_model_size, llama_model_size(model) == 96576768);
    CHECK(llama_model_n_params, llama_model_n_params(model) == 134515008);
    /* SmolLM2-135M-Instruct.Q4_1.gguf's llama.* keys. */
    CHECK(llama_model_n_ctx_train, llama_model_n_ctx_train(model) == 8192);
    CHECK(llama_model_n_embd, llama_model_n_embd(model) == N_EMBD);
    CHECK(llama_model_n_embd_inp, llama_model_n_embd_inp(model) == N_EMBD);
    CHECK(llama_model_n_embd_out, llama_model_n_embd_out(model) == N_EMBD);
    CHECK(llama_model_n_layer, llama_model_n_layer(model) == 30);
    CHECK(llama_model_n_layer_nextn, llama_model_n_layer_nextn(model) == 0);
    CHECK(llama_model_n_head, llama_model_n_head(model) == 9);
    CHECK(llama_model_n_head_kv, llama_model_n_head_kv(model) == 3);
    CHECK(llama_model_n_swa, llama_model_n_swa(model) == 0);
    CHECK(llama_model_rope_type, llama_model_rope_type(model) == LLAMA_ROPE_TYPE_NORM);
    CHECK(llama_model_rope_freq_scale_train, llama_model_rope_freq_scale_train(model) == 1.0f);
    CHECK(llama_model_n_cls_out, llama_model_n_cls_out(model) == 0);
    CHECK(llama_model_cls_label, llama_model_cls_label(model, 0) == NULL);
    CHECK(llama_n_ctx_train, llama_n_ctx_train(model) == 8192);
    CHECK(llama_n_embd, llama_n_embd(model) == N_EMBD);
    CHECK(llama_n_layer, llama_n_layer(model) == 30);
    CHECK(llama_n_head, llama_n_head(model) == 9);
    CHECK(llama_model_ftype, llama_model_ftype(model) == LLAMA_FTYPE_MOSTLY_Q4_1);
    CHECK(llama_model_has_encoder, !llama_model_has_encoder(model));
    CHECK(llama_model_has_decoder, llama_model_has_decoder(model));
    CHECK(llama_model_decoder_start_token, llama_model_decoder_start_token(model) == LLAMA_TOKEN_NULL);
    CHECK(llama_model_is_recurrent, !llama_model_is_recurrent(model));
    CHECK(llama_model_is_hybrid, !llama_model_is_hybrid(model));
    CHECK(llama_model_is_diffusion, !llama_model_is_diffusion(model));

    /* llama.cpp's snprintf contract: the full length, the text cut to the buffer. */
    char buf[512];
    int n = llama_model_desc(model, buf, sizeof buf);
    CHECK(llama_model_desc, n > 0 && n == (int)strlen(buf));
    char small[4];
    CHECK(llama_model_desc, llama_model_desc(model, small, sizeof small) == n && strlen(small) == 3);

    /* The GGUF's 33 key/values less its 4 arrays (llama.cpp leaves arrays out). */
    int count = llama_model_meta_count(model);
    CHECKF(llama_model_meta_count, count == 29, "gives %d", count);
    for (int i = 0; i < count; i++) {
        char key[256], val[512], by_key[512];
        int nk = llama_model_meta_key_by_index(model, i, key, sizeof key);
        int nv = llama_model_meta_val_str_by_index(model, i, val, sizeof val);
        CHECKF(llama_model_meta_key_by_index, nk > 0 && nk == (int)strlen(key), "index %d", i);
        CHECKF(llama_model_meta_val_str_by_index, nv >= 0, "index %d (%s)", i, key);
        int nb = llama_model_meta_val_str(model, key, by_key, sizeof by_key);
        CHECKF(llama_model_meta_val_str, nb == nv && (nv >= (int)sizeof val || strcmp(val, by_key) == 0), "key %s", key);
    }
    CHECK(llama_model_meta_val_str, llama_model_meta_val_str(model, "general.architecture", buf, sizeof buf) == 5 && str_is(buf, "llama"));
    CHECK(llama_model_meta_val_str, llama_model_meta_val_str(model, "tokenizer.ggml.padding_token_id", buf, sizeof buf) == 1 && str_is(buf, "2"));
    CHECK(llama_model_meta_val_str, llama_model_meta_val_str(model, "no.such.key", buf, sizeof buf) == -1 && buf[0] == 0);
    CHECK(llama_model_meta_key_by_index, llama_model_meta_key_by_index(model, count, buf, sizeof buf) == -1 && buf[0] == 0);
    CHECK(llama_model_meta_val_str_by_index, llama_model_meta_val_str_by_index(model, -1, buf, sizeof buf) == -1 && buf[0] == 0);

    const char *tmpl = llama_model_chat_template(model, NULL);
    CHECK(llama_model_chat_template, tmpl != NULL && strstr(tmpl, "<|im_start|>") != NULL);
    CHECK(llama_model_chat_template, llama_model_chat_template(model, "tool_use") == NULL);
}

/* ---- vocabulary -------------------------------------------------------------------------- */

static void vocabulary(const struct llama_vocab *v) {
    CHECK(llama_vocab_type, llama_vocab_type(v) == LLAMA_VOCAB_TYPE_BPE);
    CHECK(llama_vocab_n_tokens, llama_vocab_n_tokens(v) == N_VOCAB);
    CHECK(llama_n_vocab, llama_n_vocab(v) == N_VOCAB);
    /* The GGUF's tokenizer.ggml.*_token_id and add_bos_token false. */
    CHECK(llama_vocab_bos, llama_vocab_bos(v) == 1);
    CHECK(llama_vocab_eos, llama_vocab_eos(v) == 2);
    CHECK(llama_vocab_get_add_bos, !llama_vocab_get_add_bos(v));
    CHECK(llama_vocab_get_add_eos, !llama_vocab_get_add_eos(v));
    CHECK(llama_vocab_get_add_sep, !llama_vocab_get_add_sep(v));
    CHECK(llama_vocab_sep, llama_vocab_sep(v) == LLAMA_TOKEN_NULL);
    CHECK(llama_vocab_mask, llama_vocab_mask(v) == LLAMA_TOKEN_NULL);
    /* The GGUF states tokenizer.ggml.padding_token_id = 2, which llama.cpp gives. */
    CHECK(llama_vocab_pad, llama_vocab_pad(v) == 2 && llama_token_pad(v) == 2);
    llama_token nl[4];
    CHECK(llama_vocab_nl, tokenize(v, "\n", nl, 4) == 1 && llama_vocab_nl(v) == nl[0]);
    /* llama.cpp finds these by name (llama-vocab.cpp): "<|im_end|>" or "<|endoftext|>" is the
     * end of turn (its map's order picks), "<reponame>" (4) the repository token; SmolLM2 has
     * no other fill-in-the-middle token ("<file_sep>" is not one of llama.cpp's names). */
    llama_token eot = llama_vocab_eot(v);
    CHECKF(llama_vocab_eot, eot == 2 || eot == 0, "gives %d", eot);
    CHECK(llama_vocab_fim_rep, llama_vocab_fim_rep(v) == 4);
    CHECK(llama_vocab_fim_pre, llama_vocab_fim_pre(v) == LLAMA_TOKEN_NULL);
    CHECK(llama_vocab_fim_suf, llama_vocab_fim_suf(v) == LLAMA_TOKEN_NULL);
    CHECK(llama_vocab_fim_mid, llama_vocab_fim_mid(v) == LLAMA_TOKEN_NULL);
    CHECK(llama_vocab_fim_pad, llama_vocab_fim_pad(v) == LLAMA_TOKEN_NULL);
    CHECK(llama_vocab_fim_sep, llama_vocab_fim_sep(v) == LLAMA_TOKEN_NULL);
    /* End of generation: llama.cpp's set for this vocabulary is {0, 2, 4}. */
    int n_eog = 0;
    for (llama_token t = 0; t < N_VOCAB; t++) {
        if (llama_vocab_is_eog(v, t)) {
            CHECKF(llama_vocab_is_eog, t == 0 || t == 2 || t == 4, "token %d", t);
            n_eog++;
        }
    }
    CHECKF(llama_vocab_is_eog, n_eog == 3, "%d tokens end generation", n_eog);
    /* Tokens 0 to 16 are control tokens (token_type 3), 17 "!" is normal. */
    CHECK(llama_vocab_is_control, llama_vocab_is_control(v, 1) && llama_vocab_is_control(v, 16) && !llama_vocab_is_control(v, 17));
    CHECK(llama_vocab_get_attr, (llama_vocab_get_attr(v, 1) & LLAMA_TOKEN_ATTR_CONTROL) != 0);
    CHECK(llama_vocab_get_attr, (llama_vocab_get_attr(v, PARIS) & LLAMA_TOKEN_ATTR_NORMAL) != 0);
    CHECK(llama_vocab_get_text, str_is(llama_vocab_get_text(v, 1), "<|im_start|>"));
    CHECK(llama_vocab_get_text, str_is(llama_vocab_get_text(v, PARIS), "\xc4\xa0Paris"));
    /* The GGUF has no scores: llama.cpp's 0. */
    CHECK(llama_vocab_get_score, llama_vocab_get_score(v, PARIS) == 0.0f);

    /* The deprecated names give what their replacements give. */
    CHECK(llama_token_get_text, llama_token_get_text(v, PARIS) == llama_vocab_get_text(v, PARIS));
    CHECK(llama_token_get_score, llama_token_get_score(v, PARIS) == llama_vocab_get_score(v, PARIS));
    CHECK(llama_token_get_attr, llama_token_get_attr(v, 1) == llama_vocab_get_attr(v, 1));
    CHECK(llama_token_is_eog, llama_token_is_eog(v, 2) && !llama_token_is_eog(v, PARIS));
    CHECK(llama_token_is_control, llama_token_is_control(v, 1) && !llama_token_is_control(v, PARIS));
    CHECK(llama_token_bos, llama_token_bos(v) == 1);
    CHECK(llama_token_eos, llama_token_eos(v) == 2);
    CHECK(llama_token_eot, llama_token_eot(v) == eot);
    CHECK(llama_token_cls, llama_token_cls(v) == llama_vocab_cls(v));
    CHECK(llama_vocab_cls, llama_vocab_cls(v) == 1); /* llama.h: CLS is equivalent to BOS */
    CHECK(llama_token_sep, llama_token_sep(v) == llama_vocab_sep(v));
    CHECK(llama_token_nl, llama_token_nl(v) == nl[0]);
    CHECK(llama_token_pad, llama_token_pad(v) == llama_vocab_pad(v));
    CHECK(llama_add_bos_token, llama_add_bos_token(v) == llama_vocab_get_add_bos(v));
    CHECK(llama_add_eos_token, llama_add_eos_token(v) == llama_vocab_get_add_eos(v));
    CHECK(llama_token_fim_pre, llama_token_fim_pre(v) == llama_vocab_fim_pre(v));
    CHECK(llama_token_fim_suf, llama_token_fim_suf(v) == llama_vocab_fim_suf(v));
    CHECK(llama_token_fim_mid, llama_token_fim_mid(v) == llama_vocab_fim_mid(v));
    CHECK(llama_token_fim_pad, llama_token_fim_pad(v) == llama_vocab_fim_pad(v));
    CHECK(llama_token_fim_rep, llama_token_fim_rep(v) == 4);
    CHECK(llama_token_fim_sep, llama_token_fim_sep(v) == llama_vocab_fim_sep(v));
}

static void tokenizer(const struct llama_vocab *v, llama_token *prompt) {
    int n = llama_tokenize(v, PROMPT, (int32_t)strlen(PROMPT), prompt, 64, true, false);
    CHECKF(llama_tokenize, n == N_PROMPT, "'%s' gave %d tokens", PROMPT, n);
    /* Too small a buffer: minus the count. */
    llama_token few[2];
    CHECK(llama_tokenize, llama_tokenize(v, PROMPT, (int32_t)strlen(PROMPT), few, 2, true, false) == -N_PROMPT);
    llama_token t[16];
    CHECK(llama_tokenize, llama_tokenize(v, " Paris", 6, t, 16, false, false) == 1 && t[0] == PARIS);
    /* parse_special: "<|im_start|>" is token 1; as plain text it is several. */
    CHECK(llama_tokenize, llama_tokenize(v, "<|im_start|>user", 16, t, 16, false, true) == 2 && t[0] == 1);
    int plain = llama_tokenize(v, "<|im_start|>user", 16, t, 16, false, false);
    CHECK(llama_tokenize, plain > 2 && t[0] != 1);

    char buf[64];
    CHECK(llama_token_to_piece, llama_token_to_piece(v, PARIS, buf, sizeof buf, 0, false) == 6 && memcmp(buf, " Paris", 6) == 0);
    CHECK(llama_token_to_piece, llama_token_to_piece(v, PARIS, buf, sizeof buf, 1, false) == 5 && memcmp(buf, "Paris", 5) == 0);
    CHECK(llama_token_to_piece, llama_token_to_piece(v, PARIS, buf, 3, 0, false) == -6);
    CHECK(llama_token_to_piece, llama_token_to_piece(v, 2, buf, sizeof buf, 0, false) == 0);
    CHECK(llama_token_to_piece, llama_token_to_piece(v, 2, buf, sizeof buf, 0, true) == 10 && memcmp(buf, "<|im_end|>", 10) == 0);

    char text[128];
    int len = (int)strlen(PROMPT);
    CHECK(llama_detokenize, llama_detokenize(v, prompt, N_PROMPT, text, sizeof text, false, false) == len && memcmp(text, PROMPT, len) == 0);
    CHECK(llama_detokenize, llama_detokenize(v, prompt, N_PROMPT, text, 4, false, false) == -len);
    /* llama.h: remove_special removes BOS / EOS "if the model is configured to do so": SmolLM2
     * adds no BOS, so llama.cpp keeps a leading one. */
    llama_token with_bos[N_PROMPT + 1] = {1};
    memcpy(with_bos + 1, prompt, sizeof(llama_token) * N_PROMPT);
    int got = llama_detokenize(v, with_bos, N_PROMPT + 1, text, sizeof text, true, true);
    CHECK(llama_detokenize, got == len + 12 && memcmp(text, "<|im_start|>", 12) == 0);
}

static void chat(const struct llama_model *model) {
    int n = llama_chat_builtin_templates(NULL, 0);
    CHECKF(llama_chat_builtin_templates, n == 54, "gives %d", n);
    const char *names[64];
    CHECK(llama_chat_builtin_templates, llama_chat_builtin_templates(names, 64) == n);
    bool chatml = false, llama3 = false;
    for (int i = 0; i < n; i++) {
        chatml |= str_is(names[i], "chatml");
        llama3 |= str_is(names[i], "llama3");
    }
    CHECK(llama_chat_builtin_templates, chatml && llama3);

    struct llama_chat_message msgs[2] = {{"system", "Be brief."}, {"user", "Hello"}};
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    char buf[1024];
    int len = llama_chat_apply_template("chatml", msgs, 2, true, buf, sizeof buf);
    CHECK(llama_chat_apply_template, len == (int)strlen(want) && memcmp(buf, want, len) == 0);
    /* A buffer too small: the whole length, for the caller to grow it. */
    CHECK(llama_chat_apply_template, llama_chat_apply_template("chatml", msgs, 2, true, buf, 8) == len);
    CHECK(llama_chat_apply_template, llama_chat_apply_template("no-such-template", msgs, 2, true, buf, sizeof buf) == -1);
    /* The model's own template (rendered by it: a default system turn when there is none). */
    len = llama_chat_apply_template(llama_model_chat_template(model, NULL), msgs + 1, 1, true, buf, sizeof buf);
    CHECK(llama_chat_apply_template, len > 0 && len < (int)sizeof buf);
    buf[len] = 0;
    const char *tail = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    CHECK(llama_chat_apply_template, strstr(buf, "<|im_start|>system\n") == buf && strstr(buf, tail) != NULL &&
                                         strcmp(buf + len - strlen(tail), tail) == 0);
}

/* ---- contexts and decoding --------------------------------------------------------------- */

static int abort_calls;
static bool abort_now(void *data) {
    ++*(int *)data;
    return true;
}

static void contexts(struct llama_model *model) {
    struct llama_context_params cp = llama_context_default_params();
    struct llama_context *ctx = llama_init_from_model(model, cp);
    CHECK(llama_init_from_model, ctx != NULL);
    CHECK(llama_n_ctx, llama_n_ctx(ctx) == 512);
    CHECK(llama_n_ctx_seq, llama_n_ctx_seq(ctx) == 512);
    CHECK(llama_n_ubatch, llama_n_ubatch(ctx) == 512);
    CHECK(llama_n_seq_max, llama_n_seq_max(ctx) == 1);
    CHECK(llama_n_rs_seq, llama_n_rs_seq(ctx) == 0);
    /* llama.cpp: with causal attention n_batch is min(n_ctx, params.n_batch). */
    CHECK(llama_n_batch, llama_n_batch(ctx) == 512);
    CHECK(llama_get_model, llama_get_model(ctx) == model);
    CHECK(llama_get_memory, llama_get_memory(ctx) != NULL);
    /* SmolLM2 declares no pooling: unspecified takes the model's, NONE. */
    CHECK(llama_pooling_type, llama_pooling_type(ctx) == LLAMA_POOLING_TYPE_NONE);
    CHECK(llama_n_threads, llama_n_threads(ctx) == cp.n_threads);
    CHECK(llama_n_threads_batch, llama_n_threads_batch(ctx) == cp.n_threads_batch);
    llama_set_n_threads(ctx, 2, 3);
    CHECK(llama_set_n_threads, llama_n_threads(ctx) == 2 && llama_n_threads_batch(ctx) == 3);
    llama_set_causal_attn(ctx, true);
    CHECK(llama_get_causal_attn, llama_get_causal_attn(ctx));
    /* Non-causal attention on a decoder is refused (README); attention stays causal. */
    log_reset();
    llama_set_causal_attn(ctx, false);
    REFUSED(llama_set_causal_attn, llama_get_causal_attn(ctx));
    llama_set_warmup(ctx, true);
    llama_set_warmup(ctx, false);
    llama_synchronize(ctx);
    /* packlm runs on its own pool: a pool is accepted and not kept, detaching does nothing,
     * and the context goes on as before. */
    llama_attach_threadpool(ctx, NULL, NULL); /* NULL pools: llama.cpp's own */
    llama_detach_threadpool(ctx);
    CHECK(llama_attach_threadpool, llama_n_threads(ctx) == 2 && llama_n_threads_batch(ctx) == 3);
    llama_free(ctx);

    /* The deprecated constructor; n_seq_max over llama.cpp's 256 is refused. */
    cp.n_seq_max = 4;
    ctx = llama_new_context_with_model(model, cp);
    CHECK(llama_new_context_with_model, ctx != NULL && llama_n_seq_max(ctx) == 4 && llama_n_ctx_seq(ctx) == 128);
    llama_free(ctx);
    cp.n_seq_max = 257;
    log_reset();
    REFUSED(llama_init_from_model, llama_init_from_model(model, cp) == NULL);
    llama_free(NULL);
}

static void decoding(struct llama_model *model, llama_token *prompt) {
    struct llama_context *ctx = new_context(model, 512, 1);
    /* llama_batch_get_one: the caller's tokens, positions and sequence left to the context. */
    struct llama_batch one = llama_batch_get_one(prompt, N_PROMPT);
    CHECK(llama_batch_get_one, one.n_tokens == N_PROMPT && one.token == prompt && one.embd == NULL && one.pos == NULL &&
                                   one.n_seq_id == NULL && one.seq_id == NULL && one.logits == NULL);
    /* Greedy after the prompt: " Paris". */
    float *row = decode_prompt(ctx, prompt);
    CHECK(llama_decode, argmax(row, N_VOCAB) == PARIS);
    float *all = llama_get_logits(ctx);
    CHECK(llama_get_logits, all == row); /* one output row: the last token's */
    float first[N_VOCAB];
    memcpy(first, row, sizeof first);
    CHECK(llama_memory_seq_pos_max, llama_memory_seq_pos_max(llama_get_memory(ctx), 0) == N_PROMPT - 1);

    /* A batch of llama_batch_init: rows for indices 0 and 2 only, in batch order. */
    struct llama_batch b = llama_batch_init(8, 0, 1);
    CHECK(llama_batch_init, b.token != NULL && b.embd == NULL && b.pos != NULL && b.n_seq_id != NULL && b.seq_id != NULL &&
                                b.logits != NULL && b.n_tokens == 0);
    llama_token next[3] = {PARIS, 13, 198}; /* " Paris", ".", "\n" */
    for (int i = 0; i < 3; i++) put(&b, next[i], N_PROMPT + i, 0, i != 1);
    CHECK(llama_decode, llama_decode(ctx, b) == 0);
    float *rows = llama_get_logits(ctx);
    CHECK(llama_get_logits, rows != NULL);
    CHECK(llama_get_logits_ith, llama_get_logits_ith(ctx, 0) == rows && llama_get_logits_ith(ctx, 2) == rows + N_VOCAB);
    CHECK(llama_get_logits_ith, llama_get_logits_ith(ctx, -1) == rows + N_VOCAB);
    log_reset();
    REFUSED(llama_get_logits_ith, llama_get_logits_ith(ctx, 1) == NULL); /* llama.h: NULL for invalid ids */
    /* Positions other than the sequence's next: -1, nothing decoded. */
    b.n_tokens = 0;
    put(&b, PARIS, 2, 0, true);
    log_reset();
    CHECK(llama_decode, llama_decode(ctx, b) == -1);
    CHECK(llama_decode, llama_memory_seq_pos_max(llama_get_memory(ctx), 0) == N_PROMPT + 2);
    llama_batch_free(b);

    /* The abort callback: 2, every sequence as it was; cleared with NULL. */
    llama_set_abort_callback(ctx, abort_now, &abort_calls);
    llama_token t = PARIS;
    CHECK(llama_set_abort_callback, llama_decode(ctx, llama_batch_get_one(&t, 1)) == 2 && abort_calls > 0);
    CHECK(llama_set_abort_callback, llama_memory_seq_pos_max(llama_get_memory(ctx), 0) == N_PROMPT + 2);
    llama_set_abort_callback(ctx, NULL, NULL);
    CHECK(llama_set_abort_callback, llama_decode(ctx, llama_batch_get_one(&t, 1)) == 0);

    /* The same prompt again from empty: the same logits, bit for bit. */
    llama_memory_clear(llama_get_memory(ctx), true);
    row = decode_prompt(ctx, prompt);
    CHECK(llama_memory_clear, memcmp(row, first, sizeof first) == 0);

    /* Embeddings turned on: every token an output, one vector each (pooling NONE). */
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_set_embeddings(ctx, true);
    CHECK(llama_decode, llama_decode(ctx, llama_batch_get_one(prompt, N_PROMPT)) == 0);
    float *e = llama_get_embeddings(ctx);
    CHECK(llama_get_embeddings, e != NULL);
    CHECK(llama_get_embeddings_ith, llama_get_embeddings_ith(ctx, 0) == e && llama_get_embeddings_ith(ctx, -1) == e + (N_PROMPT - 1) * N_EMBD);
    llama_set_embeddings(ctx, false);
    t = PARIS;
    CHECK(llama_decode, llama_decode(ctx, llama_batch_get_one(&t, 1)) == 0);
    log_reset();
    REFUSED(llama_get_embeddings, llama_get_embeddings(ctx) == NULL);

    /* llama.cpp counts the tokens of each decode when its results are read (even with no_perf:
     * only the time is skipped): a prompt into n_p_eval, a single token into n_eval. */
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_perf_context_reset(ctx);
    decode_prompt(ctx, prompt);
    for (int i = 0; i < 3; i++) {
        t = next[i];
        CHECK(llama_decode, llama_decode(ctx, llama_batch_get_one(&t, 1)) == 0 && llama_get_logits_ith(ctx, -1) != NULL);
    }
    struct llama_perf_context_data perf = llama_perf_context(ctx);
    log_reset();
    llama_perf_context_print(ctx);
    CHECK(llama_perf_context_print, logged("llama_perf_context_print: prompt eval time"));
    CHECK(llama_perf_context, perf.n_p_eval == N_PROMPT && perf.n_eval == 3 && perf.n_reused == 0);

    /* An encoder pass: the model has no encoder (README: refused). */
    log_reset();
    REFUSED(llama_encode, llama_encode(ctx, llama_batch_get_one(prompt, N_PROMPT)) < 0);
    llama_free(ctx);
}

static void memory(struct llama_model *model, llama_token *prompt) {
    struct llama_context *ctx = new_context(model, 512, 2);
    llama_memory_t mem = llama_get_memory(ctx);
    CHECK(llama_n_ctx_seq, llama_n_ctx_seq(ctx) == 256);
    CHECK(llama_memory_can_shift, !llama_memory_can_shift(mem)); /* seq_add / seq_div are refused */
    CHECK(llama_memory_seq_pos_min, llama_memory_seq_pos_min(mem, 0) == -1);
    CHECK(llama_memory_seq_pos_max, llama_memory_seq_pos_max(mem, 0) == -1);
    struct llama_batch b = llama_batch_init(16, 0, 1);
    for (int i = 0; i < N_PROMPT; i++) put(&b, prompt[i], i, 0, i == N_PROMPT - 1);
    CHECK(llama_decode, llama_decode(ctx, b) == 0);
    CHECK(llama_memory_seq_pos_min, llama_memory_seq_pos_min(mem, 0) == 0);
    CHECK(llama_memory_seq_pos_max, llama_memory_seq_pos_max(mem, 0) == N_PROMPT - 1);

    /* A prefix copied to sequence 1; one token in each: the same logits, bit for bit. */
    llama_memory_seq_cp(mem, 0, 1, -1, -1);
    CHECK(llama_memory_seq_cp, llama_memory_seq_pos_max(mem, 1) == N_PROMPT - 1);
    b.n_tokens = 0;
    put(&b, PARIS, N_PROMPT, 0, true);
    put(&b, PARIS, N_PROMPT, 1, true);
    CHECK(llama_decode, llama_decode(ctx, b) == 0);
    CHECK(llama_memory_seq_cp, memcmp(llama_get_logits_ith(ctx, 0), llama_get_logits_ith(ctx, 1), N_VOCAB * sizeof(float)) == 0);

    /* A prefix [0, 3) of sequence 0 into the emptied sequence 1. */
    CHECK(llama_memory_seq_rm, llama_memory_seq_rm(mem, 1, -1, -1) && llama_memory_seq_pos_max(mem, 1) == -1);
    llama_memory_seq_cp(mem, 0, 1, 0, 3);
    CHECK(llama_memory_seq_cp, llama_memory_seq_pos_min(mem, 1) == 0 && llama_memory_seq_pos_max(mem, 1) == 2);
    llama_memory_seq_cp(mem, 0, 1, -1, -1);
    CHECK(llama_memory_seq_cp, llama_memory_seq_pos_max(mem, 1) == N_PROMPT);
    /* A tail goes; the middle cannot (false, nothing changed). */
    CHECK(llama_memory_seq_rm, llama_memory_seq_rm(mem, 1, N_PROMPT, -1) && llama_memory_seq_pos_max(mem, 1) == N_PROMPT - 1);
    log_reset();
    REFUSED(llama_memory_seq_rm, !llama_memory_seq_rm(mem, 0, 1, 2) && llama_memory_seq_pos_max(mem, 0) == N_PROMPT);
    llama_memory_seq_keep(mem, 0);
    CHECK(llama_memory_seq_keep, llama_memory_seq_pos_max(mem, 1) == -1 && llama_memory_seq_pos_max(mem, 0) == N_PROMPT);
    CHECK(llama_memory_seq_rm, llama_memory_seq_rm(mem, -1, -1, -1) && llama_memory_seq_pos_max(mem, 0) == -1);
    llama_batch_free(b);
    llama_free(ctx);
}

/* ---- state ------------------------------------------------------------------------------- */

static void state(struct llama_model *model, llama_token *prompt) {
    struct llama_context *a = new_context(model, 512, 1), *b = new_context(model, 512, 1);
    decode_prompt(a, prompt);
    size_t size = llama_state_get_size(a);
    CHECK(llama_state_get_size, size > 0);
    CHECK(llama_get_state_size, llama_get_state_size(a) == size);
    uint8_t *bytes = malloc(size), *old = malloc(size);
    CHECK(llama_state_get_data, bytes && old && llama_state_get_data(a, bytes, size) == size);
    log_reset();
    REFUSED(llama_state_get_data, llama_state_get_data(a, old, size - 1) == 0);
    CHECK(llama_state_set_data, llama_state_set_data(b, bytes, size) == size);
    CHECK(llama_state_set_data, llama_memory_seq_pos_max(llama_get_memory(b), 0) == N_PROMPT - 1);
    /* The restored context continues as the saved one, bit for bit. */
    llama_token t = PARIS;
    CHECK(llama_decode, llama_decode(a, llama_batch_get_one(&t, 1)) == 0 && llama_decode(b, llama_batch_get_one(&t, 1)) == 0);
    CHECK(llama_state_set_data, memcmp(llama_get_logits_ith(a, -1), llama_get_logits_ith(b, -1), N_VOCAB * sizeof(float)) == 0);
    /* A changed byte is refused (README: validated before use). */
    bytes[size / 2] ^= 0x40;
    log_reset();
    REFUSED(llama_state_set_data, llama_state_set_data(b, bytes, size) == 0);
    CHECK(llama_state_set_data, llama_memory_seq_pos_max(llama_get_memory(b), 0) == N_PROMPT);
    /* The deprecated forms, given no size. */
    size = llama_state_get_size(a);
    free(old);
    old = malloc(size);
    CHECK(llama_copy_state_data, old && llama_copy_state_data(a, old) == size);
    llama_memory_clear(llama_get_memory(b), true);
    CHECK(llama_set_state_data, llama_set_state_data(b, old) == size && llama_memory_seq_pos_max(llama_get_memory(b), 0) == N_PROMPT);

    /* Session files: llama.h's header and tokens, then the state. */
    llama_token out[64];
    size_t n_out = 0;
    const char *path = work_path("context.session");
    CHECK(llama_state_save_file, llama_state_save_file(a, path, prompt, N_PROMPT));
    llama_memory_clear(llama_get_memory(b), true);
    CHECK(llama_state_load_file, llama_state_load_file(b, path, out, 64, &n_out) && n_out == N_PROMPT &&
                                     memcmp(out, prompt, sizeof(llama_token) * N_PROMPT) == 0);
    CHECK(llama_state_load_file, llama_memory_seq_pos_max(llama_get_memory(b), 0) == N_PROMPT);
    log_reset();
    REFUSED(llama_state_load_file, !llama_state_load_file(b, path, out, 2, &n_out));
    path = work_path("deprecated.session");
    CHECK(llama_save_session_file, llama_save_session_file(a, path, prompt, N_PROMPT));
    n_out = 0;
    CHECK(llama_load_session_file, llama_load_session_file(b, path, out, 64, &n_out) && n_out == N_PROMPT);
    free(bytes);
    free(old);
    llama_free(a);
    llama_free(b);

    /* One sequence's state, into another sequence. */
    struct llama_context *s = new_context(model, 512, 2);
    llama_memory_t mem = llama_get_memory(s);
    decode_prompt(s, prompt);
    size_t ssize = llama_state_seq_get_size(s, 0);
    CHECK(llama_state_seq_get_size, ssize > 0);
    bytes = malloc(ssize);
    CHECK(llama_state_seq_get_data, bytes && llama_state_seq_get_data(s, bytes, ssize, 0) == ssize);
    CHECK(llama_state_seq_set_data, llama_state_seq_set_data(s, bytes, ssize, 1) == ssize && llama_memory_seq_pos_max(mem, 1) == N_PROMPT - 1);
    struct llama_batch batch = llama_batch_init(2, 0, 1);
    put(&batch, PARIS, N_PROMPT, 0, true);
    put(&batch, PARIS, N_PROMPT, 1, true);
    CHECK(llama_decode, llama_decode(s, batch) == 0);
    CHECK(llama_state_seq_set_data, memcmp(llama_get_logits_ith(s, 0), llama_get_logits_ith(s, 1), N_VOCAB * sizeof(float)) == 0);
    llama_batch_free(batch);
    llama_memory_seq_rm(mem, 1, -1, -1);
    CHECK(llama_state_seq_get_size_ext, llama_state_seq_get_size_ext(s, 0, LLAMA_STATE_SEQ_FLAGS_NONE) == llama_state_seq_get_size(s, 0));
    ssize = llama_state_seq_get_size(s, 0);
    free(bytes);
    bytes = malloc(ssize);
    CHECK(llama_state_seq_get_data_ext, bytes && llama_state_seq_get_data_ext(s, bytes, ssize, 0, LLAMA_STATE_SEQ_FLAGS_NONE) == ssize);
    CHECK(llama_state_seq_set_data_ext, llama_state_seq_set_data_ext(s, bytes, ssize, 1, LLAMA_STATE_SEQ_FLAGS_NONE) == ssize &&
                                            llama_memory_seq_pos_max(mem, 1) == N_PROMPT);
    log_reset();
    REFUSED(llama_state_seq_get_size, llama_state_seq_get_size(s, 5) == 0);

    path = work_path("sequence.state");
    size_t written = llama_state_seq_save_file(s, path, 0, prompt, N_PROMPT);
    CHECK(llama_state_seq_save_file, written > ssize);
    llama_memory_seq_rm(mem, 1, -1, -1);
    n_out = 0;
    CHECK(llama_state_seq_load_file, llama_state_seq_load_file(s, path, 1, out, 64, &n_out) == written && n_out == N_PROMPT &&
                                         memcmp(out, prompt, sizeof(llama_token) * N_PROMPT) == 0);
    CHECK(llama_state_seq_load_file, llama_memory_seq_pos_max(mem, 1) == N_PROMPT);
    /* tokens_out NULL: the count only (llama.h). */
    n_out = 0;
    CHECK(llama_state_seq_load_file, llama_state_seq_load_file(s, path, 1, NULL, 0, &n_out) > 0 && n_out == N_PROMPT);
    free(bytes);
    llama_free(s);
}

/* ---- the extended batch ------------------------------------------------------------------ */

static void batch_ext(struct llama_model *model, llama_token *prompt) {
    struct llama_context *plain = new_context(model, 512, 1), *ctx = new_context(model, 512, 2);
    float *want = decode_prompt(plain, prompt);
    struct llama_batch_ext *b = llama_batch_ext_init(ctx);
    CHECK(llama_batch_ext_init, b != NULL);
    for (int i = 0; i < N_PROMPT; i++) {
        llama_pos p = i;
        CHECK(llama_batch_ext_add_token, llama_batch_ext_add_token(b, 0, prompt[i]) == i);
        CHECK(llama_batch_ext_set_pos, llama_batch_ext_set_pos(b, i, &p));
        CHECK(llama_batch_ext_set_output_embd, llama_batch_ext_set_output_embd(b, i, false));
    }
    CHECK(llama_batch_ext_set_output_logits, llama_batch_ext_set_output_logits(b, N_PROMPT - 1, true));
    CHECK(llama_batch_ext_set_output_logits, !llama_batch_ext_set_output_logits(b, 99, true));
    llama_pos p = 0;
    CHECK(llama_batch_ext_set_pos, !llama_batch_ext_set_pos(b, 99, &p));
    /* llama.h's codes: -2 an invalid token, -3 an invalid sequence id. */
    CHECK(llama_batch_ext_add_token, llama_batch_ext_add_token(b, 0, -5) == -2);
    CHECK(llama_batch_ext_add_token, llama_batch_ext_add_token(b, 7, PARIS) == -3);
    CHECK(llama_process, llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) == 0);
    CHECK(llama_process, memcmp(llama_get_logits_ith(ctx, -1), want, N_VOCAB * sizeof(float)) == 0);
    log_reset();
    REFUSED(llama_process, llama_process(ctx, LLAMA_PROCESS_TYPE_ENCODE, b) < 0);

    /* An entry in a second sequence (same position); out of range refused. */
    llama_batch_ext_clear(b);
    int idx = llama_batch_ext_add_token(b, 1, PARIS);
    CHECK(llama_batch_ext_clear, idx == 0);
    CHECK(llama_batch_ext_add_seq, llama_batch_ext_add_seq(b, idx, 0));
    CHECK(llama_batch_ext_add_seq, !llama_batch_ext_add_seq(b, idx, 9) && !llama_batch_ext_add_seq(b, 5, 0));
    /* An entry without a token (an embedding's, not supported): the batch is refused. */
    llama_batch_ext_clear(b);
    CHECK(llama_batch_ext_add, llama_batch_ext_add(b, 0) == 0);
    CHECK(llama_batch_ext_add, llama_batch_ext_add(b, 9) == -3);
    log_reset();
    REFUSED(llama_process, llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) == -1);
    llama_batch_ext_free(b);
    llama_free(plain);
    llama_free(ctx);
}

/* ---- embeddings -------------------------------------------------------------------------- */

static void embeddings(struct llama_model *model, llama_token *prompt) {
    struct llama_context_params cp = llama_context_default_params();
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_NONE;
    struct llama_context *none = llama_init_from_model(model, cp);
    cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
    struct llama_context *mean = llama_init_from_model(model, cp);
    CHECK(llama_init_from_model, none != NULL && mean != NULL);
    CHECK(llama_pooling_type, llama_pooling_type(none) == LLAMA_POOLING_TYPE_NONE && llama_pooling_type(mean) == LLAMA_POOLING_TYPE_MEAN);
    CHECK(llama_decode, llama_decode(none, llama_batch_get_one(prompt, N_PROMPT)) == 0);
    CHECK(llama_decode, llama_decode(mean, llama_batch_get_one(prompt, N_PROMPT)) == 0);
    float *rows = llama_get_embeddings(none);
    CHECK(llama_get_embeddings, rows != NULL);
    for (int i = 0; i < N_PROMPT; i++) CHECK(llama_get_embeddings_ith, llama_get_embeddings_ith(none, i) == rows + i * N_EMBD);
    /* llama.h: NULL for pooling NONE. */
    log_reset();
    REFUSED(llama_get_embeddings_seq, llama_get_embeddings_seq(none, 0) == NULL);
    /* The pooled vector is the mean of the per-token ones. */
    float *pooled = llama_get_embeddings_seq(mean, 0);
    CHECK(llama_get_embeddings_seq, pooled != NULL);
    for (int j = 0; j < N_EMBD; j++) {
        double sum = 0;
        for (int i = 0; i < N_PROMPT; i++) sum += rows[i * N_EMBD + j];
        double m = sum / N_PROMPT;
        CHECKF(llama_get_embeddings_seq, fabs(pooled[j] - m) <= 1e-4 * (1 + fabs(m)), "component %d: %g, the mean %g", j, pooled[j], m);
    }
    log_reset();
    REFUSED(llama_get_embeddings_seq, llama_get_embeddings_seq(mean, 1) == NULL);
    llama_free(none);
    llama_free(mean);
}

/* ---- LoRA adapters ----------------------------------------------------------------------- */

static void adapters(struct llama_model *model, const char *model_path, llama_token *prompt) {
    struct llama_adapter_lora *lora = llama_adapter_lora_init(model, work_path("lora.gguf"));
    CHECK(llama_adapter_lora_init, lora != NULL);
    /* make_lora.py's five scalar key/values. */
    char buf[128];
    int count = llama_adapter_meta_count(lora);
    CHECKF(llama_adapter_meta_count, count == 5, "gives %d", count);
    CHECK(llama_adapter_meta_val_str, llama_adapter_meta_val_str(lora, "general.type", buf, sizeof buf) == 7 && str_is(buf, "adapter"));
    CHECK(llama_adapter_meta_val_str, llama_adapter_meta_val_str(lora, "adapter.type", buf, sizeof buf) == 4 && str_is(buf, "lora"));
    CHECK(llama_adapter_meta_val_str, llama_adapter_meta_val_str(lora, "no.such.key", buf, sizeof buf) == -1 && buf[0] == 0);
    for (int i = 0; i < count; i++) {
        char key[128], val[128], by_key[128];
        CHECKF(llama_adapter_meta_key_by_index, llama_adapter_meta_key_by_index(lora, i, key, sizeof key) > 0, "index %d", i);
        int nv = llama_adapter_meta_val_str_by_index(lora, i, val, sizeof val);
        CHECKF(llama_adapter_meta_val_str_by_index, nv >= 0 && llama_adapter_meta_val_str(lora, key, by_key, sizeof by_key) == nv &&
                                                        strcmp(val, by_key) == 0, "index %d (%s)", i, key);
    }
    CHECK(llama_adapter_meta_key_by_index, llama_adapter_meta_key_by_index(lora, count, buf, sizeof buf) == -1 && buf[0] == 0);
    CHECK(llama_adapter_meta_val_str_by_index, llama_adapter_meta_val_str_by_index(lora, count, buf, sizeof buf) == -1 && buf[0] == 0);
    /* A plain LoRA: no invocation tokens. */
    CHECK(llama_adapter_get_alora_n_invocation_tokens, llama_adapter_get_alora_n_invocation_tokens(lora) == 0);
    CHECK(llama_adapter_get_alora_invocation_tokens, llama_adapter_get_alora_invocation_tokens(lora) == NULL);
    /* Refused (README): an aLoRA; a file that is not an adapter (the base model itself). */
    log_reset();
    REFUSED(llama_adapter_lora_init, llama_adapter_lora_init(model, work_path("alora.gguf")) == NULL);
    log_reset();
    REFUSED(llama_adapter_lora_init, llama_adapter_lora_init(model, model_path) == NULL);

    /* Under the adapter the logits move; cleared, they are the base's again, bit for bit. */
    struct llama_context *ctx = new_context(model, 512, 1);
    float base[N_VOCAB];
    memcpy(base, decode_prompt(ctx, prompt), sizeof base);
    float scale = 1.0f;
    CHECK(llama_set_adapters_lora, llama_set_adapters_lora(ctx, &lora, 1, &scale) == 0);
    llama_memory_clear(llama_get_memory(ctx), true);
    float *with = decode_prompt(ctx, prompt);
    double moved = 0;
    for (int i = 0; i < N_VOCAB; i++) moved = fmax(moved, fabs(with[i] - base[i]));
    CHECKF(llama_set_adapters_lora, moved > 1e-3, "the adapter moved no logit by more than %g", moved);
    CHECK(llama_set_adapters_lora, llama_set_adapters_lora(ctx, NULL, 0, NULL) == 0);
    llama_memory_clear(llama_get_memory(ctx), true);
    CHECK(llama_set_adapters_lora, memcmp(decode_prompt(ctx, prompt), base, sizeof base) == 0);
    /* Scale 0 is no adapter. */
    scale = 0.0f;
    CHECK(llama_set_adapters_lora, llama_set_adapters_lora(ctx, &lora, 1, &scale) == 0);
    llama_memory_clear(llama_get_memory(ctx), true);
    CHECK(llama_set_adapters_lora, memcmp(decode_prompt(ctx, prompt), base, sizeof base) == 0);
    llama_free(ctx);
    llama_adapter_lora_free(lora);
    llama_adapter_lora_free(NULL);
}

/* ---- samplers ---------------------------------------------------------------------------- */

/* Tokens 0..3 with logits 1, 2, 3, 4: p = 0.032, 0.087, 0.237, 0.644. */
static llama_token_data cand[4];
static llama_token_data_array arr;

static llama_token_data_array *fresh(void) {
    for (int i = 0; i < 4; i++) cand[i] = (llama_token_data){i, (float)(i + 1), 0.0f};
    arr = (llama_token_data_array){cand, 4, -1, false};
    return &arr;
}

/* The logit now held by token `id`; NAN when it is no longer a candidate. */
static float logit_of(llama_token id) {
    for (size_t i = 0; i < arr.size; i++) if (arr.data[i].id == id) return arr.data[i].logit;
    return NAN;
}

static llama_token selected(void) {
    return arr.selected >= 0 && (size_t)arr.selected < arr.size ? arr.data[arr.selected].id : -1;
}

/* A sampler of the client's own: selects token 0, counts its calls. */
struct mine {
    int accepts, applies, resets, frees;
};
static struct mine mine_state, mine_clone_state;
static const char *mine_name(const struct llama_sampler *s) {
    (void)s;
    return "mine";
}
static void mine_accept(struct llama_sampler *s, llama_token t) {
    (void)t;
    ((struct mine *)s->ctx)->accepts++;
}
static void mine_apply(struct llama_sampler *s, llama_token_data_array *cur) {
    ((struct mine *)s->ctx)->applies++;
    for (size_t i = 0; i < cur->size; i++) if (cur->data[i].id == 0) cur->selected = (int64_t)i;
}
static void mine_reset(struct llama_sampler *s) {
    ((struct mine *)s->ctx)->resets++;
}
static struct llama_sampler *mine_clone(const struct llama_sampler *s);
static void mine_free(struct llama_sampler *s) {
    ((struct mine *)s->ctx)->frees++;
}
static struct llama_sampler_i mine_iface = {
    .name = mine_name, .accept = mine_accept, .apply = mine_apply, .reset = mine_reset, .clone = mine_clone, .free = mine_free,
};
static struct llama_sampler *mine_clone(const struct llama_sampler *s) {
    (void)s;
    return llama_sampler_init(&mine_iface, &mine_clone_state);
}

/* `s` applied to the four candidates (left in `arr`). */
static void apply_fresh(struct llama_sampler *s) {
    llama_sampler_apply(s, fresh());
}

static void samplers_synthetic(const struct llama_vocab *v) {
    struct llama_sampler *s = llama_sampler_init_greedy();
    CHECK(llama_sampler_init_greedy, str_is(llama_sampler_name(s), "greedy"));
    apply_fresh(s);
    CHECK(llama_sampler_init_greedy, selected() == 3);
    CHECK(llama_sampler_get_seed, llama_sampler_get_seed(s) == LLAMA_DEFAULT_SEED);
    llama_sampler_free(s);

    /* dist: seeded, reset repeats, a clone and a copy draw what the original draws. */
    s = llama_sampler_init_dist(1234);
    CHECK(llama_sampler_init_dist, str_is(llama_sampler_name(s), "dist") && llama_sampler_get_seed(s) == 1234);
    llama_token draws[16];
    for (int i = 0; i < 16; i++) {
        apply_fresh(s);
        draws[i] = selected();
        CHECK(llama_sampler_init_dist, draws[i] >= 0 && draws[i] < 4);
    }
    llama_sampler_reset(s);
    for (int i = 0; i < 16; i++) {
        apply_fresh(s);
        CHECKF(llama_sampler_reset, selected() == draws[i], "draw %d after the reset", i);
    }
    struct llama_sampler *clone = llama_sampler_clone(s), *other = llama_sampler_init_dist(99);
    CHECK(llama_sampler_clone, clone != NULL && str_is(llama_sampler_name(clone), "dist"));
    llama_sampler_copy(s, other);
    for (int i = 0; i < 8; i++) {
        apply_fresh(s);
        llama_token want = selected();
        apply_fresh(clone);
        CHECKF(llama_sampler_clone, selected() == want, "draw %d", i);
        apply_fresh(other);
        CHECKF(llama_sampler_copy, selected() == want, "draw %d", i);
    }
    llama_sampler_free(clone);
    llama_sampler_free(other);
    llama_sampler_free(s);

    s = llama_sampler_init_top_k(2);
    apply_fresh(s);
    CHECK(llama_sampler_init_top_k, str_is(llama_sampler_name(s), "top-k") && arr.size == 2 && logit_of(3) == 4 && logit_of(2) == 3);
    llama_sampler_free(s);
    s = llama_sampler_init_top_k(0); /* llama.h: k <= 0 is a no-op (llama.cpp's empty "?top-k") */
    apply_fresh(s);
    CHECK(llama_sampler_init_top_k, arr.size == 4 && logit_of(0) == 1.0f);
    CHECK(llama_sampler_init_top_k, str_is(llama_sampler_name(s), "?top-k"));
    llama_sampler_free(s);
    s = llama_sampler_init_top_p(0.5f, 1);
    apply_fresh(s);
    CHECK(llama_sampler_init_top_p, str_is(llama_sampler_name(s), "top-p") && arr.size == 1 && arr.data[0].id == 3);
    llama_sampler_free(s);
    s = llama_sampler_init_min_p(0.3f, 1);
    apply_fresh(s);
    CHECK(llama_sampler_init_min_p, str_is(llama_sampler_name(s), "min-p") && arr.size == 2 && !isnan(logit_of(2)));
    llama_sampler_free(s);
    /* typical 0.5: the two tokens nearest the entropy (0.947 nats) cover 0.88. */
    s = llama_sampler_init_typical(0.5f, 1);
    apply_fresh(s);
    CHECK(llama_sampler_init_typical, str_is(llama_sampler_name(s), "typical") && arr.size == 2 && !isnan(logit_of(2)) && !isnan(logit_of(3)));
    llama_sampler_free(s);
    s = llama_sampler_init_temp(2.0f);
    apply_fresh(s);
    CHECK(llama_sampler_init_temp, str_is(llama_sampler_name(s), "temp") && logit_of(0) == 0.5f && logit_of(3) == 2.0f);
    llama_sampler_free(s);
    s = llama_sampler_init_temp(0.0f); /* llama.h: only the largest logit stays finite */
    apply_fresh(s);
    CHECK(llama_sampler_init_temp, logit_of(3) == 4.0f && isinf(logit_of(0)) && isinf(logit_of(2)));
    llama_sampler_free(s);
    s = llama_sampler_init_temp_ext(2.0f, 0.0f, 1.0f); /* delta 0: plain temperature */
    apply_fresh(s);
    CHECK(llama_sampler_init_temp_ext, str_is(llama_sampler_name(s), "temp-ext") && logit_of(1) == 1.0f && logit_of(3) == 2.0f);
    llama_sampler_free(s);
    /* XTC with chance 1: every token of p >= 0.1 but the least of them goes (token 3). */
    s = llama_sampler_init_xtc(1.0f, 0.1f, 1, 42);
    apply_fresh(s);
    CHECK(llama_sampler_init_xtc, str_is(llama_sampler_name(s), "xtc") && arr.size == 3 && isnan(logit_of(3)) && arr.data[0].id == 2);
    llama_sampler_free(s);
    /* top-n-sigma 1: mean 2.5, sigma 1.118: logits under 2.88 become -inf. */
    s = llama_sampler_init_top_n_sigma(1.0f);
    apply_fresh(s);
    CHECK(llama_sampler_init_top_n_sigma, str_is(llama_sampler_name(s), "top-n-sigma") && isinf(logit_of(0)) && isinf(logit_of(1)) &&
                                              logit_of(2) == 3.0f && logit_of(3) == 4.0f);
    llama_sampler_free(s);
    s = llama_sampler_init_mirostat(4, 42, 5.0f, 0.1f, 100);
    apply_fresh(s);
    CHECK(llama_sampler_init_mirostat, str_is(llama_sampler_name(s), "mirostat") && selected() >= 0 && llama_sampler_get_seed(s) == 42);
    llama_sampler_free(s);
    s = llama_sampler_init_mirostat_v2(43, 5.0f, 0.1f);
    apply_fresh(s);
    CHECK(llama_sampler_init_mirostat_v2, str_is(llama_sampler_name(s), "mirostat-v2") && selected() >= 0 && llama_sampler_get_seed(s) == 43);
    llama_sampler_free(s);
    s = llama_sampler_init_adaptive_p(0.5f, 0.9f, 44);
    apply_fresh(s);
    CHECK(llama_sampler_init_adaptive_p, str_is(llama_sampler_name(s), "adaptive-p") && selected() >= 0);
    llama_sampler_free(s);
    /* Repeat penalty 2 on an accepted token: a positive logit is divided by it. */
    s = llama_sampler_init_penalties(4, 64, 2.0f, 0.0f, 0.0f);
    llama_sampler_accept(s, 3);
    apply_fresh(s);
    CHECK(llama_sampler_init_penalties, str_is(llama_sampler_name(s), "penalties") && logit_of(3) == 2.0f && logit_of(2) == 3.0f);
    llama_sampler_free(s);
    llama_logit_bias bias = {0, 10.0f};
    s = llama_sampler_init_logit_bias(4, 1, &bias);
    apply_fresh(s);
    CHECK(llama_sampler_init_logit_bias, str_is(llama_sampler_name(s), "logit-bias") && logit_of(0) == 11.0f && logit_of(1) == 2.0f);
    llama_sampler_free(s);
    /* DRY: after 1 2 3 1 2, token 3 would extend a repeat of 2 (allowed 2): minus 0.8 * 1.75^0. */
    const char *breakers[] = {"\n"};
    s = llama_sampler_init_dry(v, 0.8f, 1.75f, 2, 64, breakers, 1);
    llama_token hist[5] = {1, 2, 3, 1, 2};
    for (int i = 0; i < 5; i++) llama_sampler_accept(s, hist[i]);
    apply_fresh(s);
    CHECK(llama_sampler_init_dry, str_is(llama_sampler_name(s), "dry") && fabsf(logit_of(3) - 3.2f) < 1e-5f && logit_of(2) == 3.0f);
    llama_sampler_free(s);
    /* infill: 3 * p(end of generation) * 4 candidates > p(text): only tokens 0 and 2 stay. */
    s = llama_sampler_init_infill(v);
    apply_fresh(s);
    CHECK(llama_sampler_init_infill, str_is(llama_sampler_name(s), "infill") && arr.size == 2 && !isnan(logit_of(0)) && !isnan(logit_of(2)));
    llama_sampler_free(s);

    /* The client's own sampler through its vtable. */
    s = llama_sampler_init(&mine_iface, &mine_state);
    CHECK(llama_sampler_init, s != NULL && str_is(llama_sampler_name(s), "mine"));
    apply_fresh(s);
    llama_sampler_accept(s, 0);
    llama_sampler_reset(s);
    CHECK(llama_sampler_init, selected() == 0 && mine_state.applies == 1 && mine_state.accepts == 1 && mine_state.resets == 1);
    clone = llama_sampler_clone(s);
    CHECK(llama_sampler_clone, clone != NULL && clone->ctx == &mine_clone_state);
    llama_sampler_free(clone);
    llama_sampler_free(s);
    CHECK(llama_sampler_free, mine_state.frees == 1 && mine_clone_state.frees == 1);

    /* A chain: add, get, n, remove; its seed is its last seeded sampler's. */
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    struct llama_sampler *chain = llama_sampler_chain_init(cp);
    struct llama_sampler *k = llama_sampler_init_top_k(3), *t = llama_sampler_init_temp(1.5f), *d = llama_sampler_init_dist(77);
    llama_sampler_chain_add(chain, k);
    llama_sampler_chain_add(chain, t);
    llama_sampler_chain_add(chain, d);
    CHECK(llama_sampler_chain_init, str_is(llama_sampler_name(chain), "chain"));
    CHECK(llama_sampler_chain_n, llama_sampler_chain_n(chain) == 3);
    CHECK(llama_sampler_chain_get, llama_sampler_chain_get(chain, 0) == k && llama_sampler_chain_get(chain, 2) == d);
    CHECK(llama_sampler_chain_get, llama_sampler_chain_get(chain, 3) == NULL && llama_sampler_chain_get(k, 0) == NULL);
    /* llama.h: -1 gives the chain itself, the way to ask whether a sampler is a chain. */
    CHECK(llama_sampler_chain_get, llama_sampler_chain_get(chain, -1) == chain && llama_sampler_chain_get(k, -1) == NULL &&
                                       llama_sampler_chain_get(chain, -2) == NULL);
    CHECK(llama_sampler_get_seed, llama_sampler_get_seed(chain) == 77);
    CHECK(llama_sampler_chain_remove, llama_sampler_chain_remove(chain, 1) == t && llama_sampler_chain_n(chain) == 2);
    llama_sampler_free(t);
    apply_fresh(chain);
    CHECK(llama_sampler_chain_add, arr.size <= 3 && selected() >= 1);
    llama_sampler_free(chain);
}

static void samplers_on_logits(struct llama_model *model, llama_token *prompt) {
    const struct llama_vocab *v = llama_model_get_vocab(model);
    struct llama_context *ctx = new_context(model, 512, 1);
    float *row = decode_prompt(ctx, prompt);
    llama_token best = argmax(row, N_VOCAB);

    /* llama_sampler_sample: apply, accept, return; the chain counts each accept. */
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = false;
    struct llama_sampler *chain = llama_sampler_chain_init(cp);
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    CHECK(llama_sampler_sample, llama_sampler_sample(chain, ctx, -1) == best && best == PARIS);
    CHECK(llama_sampler_sample, llama_sampler_sample(chain, ctx, N_PROMPT - 1) == best);
    struct llama_perf_sampler_data perf = llama_perf_sampler(chain);
    CHECK(llama_perf_sampler, perf.n_sample == 2 && perf.t_sample_ms >= 0.0);
    log_reset();
    llama_perf_sampler_print(chain);
    CHECK(llama_perf_sampler_print, logged("llama_perf_sampler_print:    samplers time = ") && logged(" ms /     2 runs"));
    llama_perf_sampler_reset(chain);
    CHECK(llama_perf_sampler_reset, llama_perf_sampler(chain).n_sample == 0);
    llama_sampler_free(chain);

    /* A grammar that allows " Rome" only: the sampled token is its beginning. */
    chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    struct llama_sampler *g = llama_sampler_init_grammar(v, "root ::= \" Rome\"", "root");
    CHECK(llama_sampler_init_grammar, g != NULL && str_is(llama_sampler_name(g), "grammar"));
    llama_sampler_chain_add(chain, g);
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    llama_token tok = llama_sampler_sample(chain, ctx, -1);
    char piece[32];
    int n = llama_token_to_piece(v, tok, piece, sizeof piece, 0, false);
    CHECKF(llama_sampler_init_grammar, n > 0 && strncmp(" Rome", piece, n) == 0, "sampled token %d", tok);
    llama_sampler_free(chain);
    log_reset();
    REFUSED(llama_sampler_init_grammar, llama_sampler_init_grammar(v, "root ::= (", "root") == NULL); /* llama.h: NULL */

    /* Lazy grammars change nothing before their trigger. */
    const char *words[] = {"Rome"};
    g = llama_sampler_init_grammar_lazy(v, "root ::= \"Rome\"", "root", words, 1, NULL, 0);
    CHECK(llama_sampler_init_grammar_lazy, g != NULL && str_is(llama_sampler_name(g), "grammar"));
    apply_fresh(g);
    CHECK(llama_sampler_init_grammar_lazy, arr.size == 4 && !isinf(logit_of(0)) && !isinf(logit_of(3)));
    llama_sampler_free(g);
    const char *patterns[] = {"^.*Rome"};
    g = llama_sampler_init_grammar_lazy_patterns(v, "root ::= \"Rome\"", "root", patterns, 1, NULL, 0);
    CHECK(llama_sampler_init_grammar_lazy_patterns, g != NULL && str_is(llama_sampler_name(g), "grammar"));
    apply_fresh(g);
    CHECK(llama_sampler_init_grammar_lazy_patterns, arr.size == 4 && !isinf(logit_of(1)));
    llama_sampler_free(g);
    const char *bad[] = {"("};
    log_reset();
    REFUSED(llama_sampler_init_grammar_lazy_patterns, llama_sampler_init_grammar_lazy_patterns(v, "root ::= \"Rome\"", "root", bad, 1, NULL, 0) == NULL);
    llama_free(ctx);
}

/* ---- what this library does not serve ---------------------------------------------------- */

static void unsupported(struct llama_model *model, const char *model_path, llama_token *prompt) {
    struct llama_model_params mp = llama_model_default_params();
    const char *paths[1] = {model_path};
    log_reset();
    /* One file is the model itself; two paths of an unsplit file are refused (tests/llama/splits.sh
       opens a real split). */
    struct llama_model *one = llama_model_load_from_splits(paths, 1, mp);
    CHECK(llama_model_load_from_splits, one != NULL && llama_model_n_params(one) == llama_model_n_params(model));
    llama_model_free(one);
    const char *twice[2] = {model_path, model_path};
    log_reset();
    REFUSED(llama_model_load_from_splits, llama_model_load_from_splits(twice, 2, mp) == NULL);
    /* A FILE * at position 0 loads as the path does (tests/llama/perf_load.c checks the logits);
     * at another position (a GGUF embedded in a larger file) it is refused. */
    FILE *f = fopen(model_path, "rb");
    CHECK(fopen, f != NULL);
    struct llama_model *from_file = llama_model_load_from_file_ptr(f, mp);
    CHECK(llama_model_load_from_file_ptr, from_file != NULL && llama_model_n_params(from_file) == llama_model_n_params(model));
    llama_model_free(from_file);
    CHECK(fseek, fseek(f, 1, SEEK_SET) == 0);
    log_reset();
    REFUSED(llama_model_load_from_file_ptr, llama_model_load_from_file_ptr(f, mp) == NULL);
    fclose(f);
    log_reset();
    REFUSED(llama_model_init_from_user, llama_model_init_from_user(NULL, NULL, NULL, mp) == NULL);
    const char *saved = work_path("saved.gguf");
    log_reset();
    llama_model_save_to_file(model, saved);
    REFUSED(llama_model_save_to_file, !file_exists(saved));
    /* llama.h: "Returns 0 on success"; llama.cpp gives 1 when it fails. */
    struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    const char *quantized = work_path("quantized.gguf");
    log_reset();
    uint32_t q = llama_model_quantize(model_path, quantized, &qp);
    REFUSED(llama_model_quantize, !file_exists(quantized));
    CHECK(llama_model_quantize, q == 1 && logged("failed to quantize"));

    f = fopen(work_path("lora.gguf"), "rb");
    CHECK(fopen, f != NULL);
    struct llama_adapter_lora *lora = llama_adapter_lora_init_from_file_ptr(model, f);
    CHECK(llama_adapter_lora_init_from_file_ptr, lora != NULL);
    llama_adapter_lora_free(lora);
    CHECK(fseek, fseek(f, 1, SEEK_SET) == 0);
    log_reset();
    REFUSED(llama_adapter_lora_init_from_file_ptr, llama_adapter_lora_init_from_file_ptr(model, f) == NULL);
    fclose(f);

    struct llama_context *ctx = new_context(model, 512, 1);
    llama_memory_t mem = llama_get_memory(ctx);
    decode_prompt(ctx, prompt);
    static float cvec[N_EMBD * 30];
    log_reset();
    /* A zero vector from layer 1 (llama.h: data starts at layer 1) is accepted and changes nothing;
     * an n_embd other than the model's gives -1 and a log line (llama-adapter.cpp); the rest is
     * tests/llama/cvec.c. */
    CHECK(llama_set_adapter_cvec, llama_set_adapter_cvec(ctx, cvec, N_EMBD * 29, N_EMBD, 1, 30) == 0);
    CHECK(llama_set_adapter_cvec, llama_set_adapter_cvec(ctx, cvec, N_EMBD * 29, N_EMBD - 1, 1, 30) == -1 && logged("n_embd"));
    CHECK(llama_set_adapter_cvec, llama_set_adapter_cvec(ctx, NULL, 0, 0, -1, -1) == 0);
    log_reset();
    llama_memory_seq_add(mem, 0, 0, -1, 3);
    REFUSED(llama_memory_seq_add, llama_memory_seq_pos_max(mem, 0) == N_PROMPT - 1);
    log_reset();
    llama_memory_seq_div(mem, 0, 0, -1, 2);
    REFUSED(llama_memory_seq_div, llama_memory_seq_pos_max(mem, 0) == N_PROMPT - 1);

    /* Embedding inputs (README: not there yet): llama_batch_init with embd gives the empty batch. */
    log_reset();
    struct llama_batch eb = llama_batch_init(4, N_EMBD, 1);
    REFUSED(llama_batch_init, eb.token == NULL && eb.embd == NULL && eb.seq_id == NULL);
    llama_batch_free(eb);
    struct llama_batch_ext *b = llama_batch_ext_init(ctx);
    static const float row[N_EMBD];
    struct llama_embd embd = {row, 1, N_EMBD};
    log_reset();
    REFUSED(llama_batch_ext_add_embd, llama_batch_ext_add_embd(b, 0, embd) < 0);
    int idx = llama_batch_ext_add_token(b, 0, PARIS);
    log_reset();
    REFUSED(llama_batch_ext_set_embd_token, !llama_batch_ext_set_embd_token(b, idx, embd));
    log_reset();
    REFUSED(llama_batch_ext_set_embd_state, !llama_batch_ext_set_embd_state(b, idx, embd));
    llama_batch_ext_free(b);

    /* Backend sampling (tests/llama/backend_sampling.c checks it at length): a chain attached
     * after the last decode has no results yet, llama.cpp's "none" (the logits count is
     * n_vocab and the candidates the vocabulary's ids); NULL detaches it. */
    struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    CHECK(llama_set_sampler, llama_set_sampler(ctx, 0, chain));
    CHECK(llama_get_sampled_token_ith, llama_get_sampled_token_ith(ctx, -1) == LLAMA_TOKEN_NULL);
    CHECK(llama_get_sampled_probs_ith, llama_get_sampled_probs_ith(ctx, -1) == NULL);
    CHECK(llama_get_sampled_probs_count_ith, llama_get_sampled_probs_count_ith(ctx, -1) == 0);
    CHECK(llama_get_sampled_logits_ith, llama_get_sampled_logits_ith(ctx, -1) == NULL);
    CHECK(llama_get_sampled_logits_count_ith, llama_get_sampled_logits_count_ith(ctx, -1) == N_VOCAB);
    const llama_token *ids = llama_get_sampled_candidates_ith(ctx, -1);
    CHECK(llama_get_sampled_candidates_ith, ids != NULL && ids[0] == 0 && ids[N_VOCAB - 1] == N_VOCAB - 1);
    CHECK(llama_get_sampled_candidates_count_ith, llama_get_sampled_candidates_count_ith(ctx, -1) == 0);
    /* Attached, the next decode selects the argmax of the row for a greedy chain. */
    llama_token next_tok = PARIS;
    CHECK(llama_decode, llama_decode(ctx, llama_batch_get_one(&next_tok, 1)) == 0);
    CHECK(llama_get_sampled_token_ith, llama_get_sampled_token_ith(ctx, -1) == argmax(llama_get_logits_ith(ctx, -1), N_VOCAB));
    CHECK(llama_set_sampler, llama_set_sampler(ctx, 0, NULL));
    llama_sampler_free(chain);
    CHECK(llama_memory_seq_rm, llama_memory_seq_rm(mem, 0, N_PROMPT, -1));

    /* llama.cpp writes the count (0 for SmolLM2, which has none); tests/llama/splits.sh reads a
       file that has a list. */
    int32_t n_suppress = 12345;
    CHECK(llama_vocab_get_suppress_tokens, llama_vocab_get_suppress_tokens(llama_model_get_vocab(model), &n_suppress) == NULL);
    CHECK(llama_vocab_get_suppress_tokens, n_suppress == 0);

    /* Training. llama.h: llama_opt_param_filter_all "always returns true". */
    log_reset();
    bool all = llama_opt_param_filter_all(NULL, NULL);
    CHECK(llama_opt_param_filter_all, all);
    struct llama_opt_params op;
    memset(&op, 0, sizeof op);
    log_reset();
    llama_opt_init(ctx, model, op);
    CHECKF(llama_opt_init, logged("llama_opt_init"), "no log line names it");
    log_reset();
    llama_opt_epoch(ctx, NULL, NULL, NULL, 0, NULL, NULL);
    CHECKF(llama_opt_epoch, logged("llama_opt_epoch"), "no log line names it");
    /* The context is as it was. */
    CHECK(llama_opt_epoch, llama_memory_seq_pos_max(mem, 0) == N_PROMPT - 1);
    llama_free(ctx);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: all_functions MODEL.gguf TINY_FOLDER WORKDIR\n");
        return 2;
    }
    const char *model_path = argv[1], *tiny_path = argv[2];
    snprintf(work_dir, sizeof work_dir, "%s", argv[3]);
    const char *s = getenv("ALL_FUNCTIONS_STRICT");
    strict = s != NULL && strcmp(s, "1") == 0;
    llama_log_set(on_log, &n_log_calls);
    llama_backend_init();
    globals();

    tiny_model(tiny_path);
    struct llama_model *model = llama_model_load_from_file(model_path, llama_model_default_params());
    CHECK(llama_model_load_from_file, model != NULL);
    model_facts(model);
    group_done("models: SmolLM2 and the tiny folder loaded (deprecated names too, refusals), hyperparameters, metadata, desc, ftype, chat template");
    const struct llama_vocab *v = llama_model_get_vocab(model);
    CHECK(llama_model_get_vocab, v != NULL);
    vocabulary(v);
    group_done("vocabulary: special tokens, end of generation, attributes, text, the deprecated llama_token_* names");
    llama_token prompt[64];
    tokenizer(v, prompt);
    group_done("tokenizer: llama_tokenize, llama_token_to_piece, llama_detokenize");
    chat(model);
    group_done("chat templates: the 54 built-in names, chatml, the model's own template");
    contexts(model);
    group_done("contexts: sizes, threads, attention, warmup, synchronize, threadpools, the deprecated constructor");
    decoding(model, prompt);
    group_done("decoding: batches, logits rows, abort callback, embeddings on and off, perf counts, encode refused");
    memory(model, prompt);
    group_done("memory: positions, seq_cp (bit-equal continuation), seq_rm, seq_keep, clear");
    state(model, prompt);
    group_done("state: bytes, sequence bytes (and _ext), the deprecated forms, session and sequence files");
    batch_ext(model, prompt);
    group_done("batch_ext: add, positions, outputs, sequences, llama_process equal to llama_decode");
    embeddings(model, prompt);
    group_done("embeddings: per token (NONE) and pooled (MEAN, the mean of the per-token vectors)");
    adapters(model, model_path, prompt);
    group_done("adapters: LoRA metadata, aLoRA getters, set / clear (the base's logits again, bit for bit), refusals");
    samplers_synthetic(v);
    samplers_on_logits(model, prompt);
    group_done("samplers: every llama_sampler_init_*, the client's own, chains, clone / copy / reset, sample, perf, grammars");
    unsupported(model, model_path, prompt);
    group_done("not served: each gives llama.cpp's failure value and a log line naming it");

    llama_model_free(model);
    llama_model_free(NULL);
    llama_backend_free();
    printf("all llama.h functions called and checked; %d deviation%s from llama.cpp (listed above)\n", n_deviations, n_deviations == 1 ? "" : "s");
    return 0;
}
