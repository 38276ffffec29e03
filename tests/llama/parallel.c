/* What llama.cpp's examples/parallel does, compiled against llama-cpp-python 0.3.36's llama.h
 * and linked with -lllama: one context of several sequences serves clients that start and
 * finish at different steps (continuous batching). A shared system prompt is decoded in
 * sequence 0 and copied to each client's sequence; each step is one llama_decode holding a
 * token of every running client and the whole prompt of a client starting then. Each client's
 * greedy reply must equal what a context of one sequence gives the same tokens.
 *
 *   parallel MODEL.gguf        exit 0 when every client's tokens match */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

#define N_CLIENTS 3
#define N_GEN 12

/* SmolLM2's chat format (ChatML), written out: the system turn is the shared prefix. */
static const char *SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
static const char *PROMPTS[N_CLIENTS] = {"<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
                                         "<|im_start|>user\nName three colors.<|im_end|>\n<|im_start|>assistant\n",
                                         "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n"};
static const int START[N_CLIENTS] = {0, 2, 5};

static int tokenize(const struct llama_vocab *v, const char *text, int add_special, llama_token *out, int cap) {
    int n = llama_tokenize(v, text, (int)strlen(text), out, cap, add_special, 1);
    if (n < 0) { fprintf(stderr, "tokenize failed\n"); exit(1); }
    return n;
}

static llama_token argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static void add(struct llama_batch *b, llama_token t, llama_pos p, llama_seq_id s, int logits) {
    b->token[b->n_tokens] = t;
    b->pos[b->n_tokens] = p;
    b->n_seq_id[b->n_tokens] = 1;
    b->seq_id[b->n_tokens][0] = s;
    b->logits[b->n_tokens] = (int8_t)logits;
    b->n_tokens++;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: parallel MODEL.gguf\n"); return 2; }
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);

    llama_token sys[256], prompt[N_CLIENTS][256];
    int n_sys = tokenize(vocab, SYSTEM, 1, sys, 256), n_prompt[N_CLIENTS];
    for (int k = 0; k < N_CLIENTS; k++) n_prompt[k] = tokenize(vocab, PROMPTS[k], 0, prompt[k], 256);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2048;
    cp.n_seq_max = N_CLIENTS + 1;
    cp.kv_unified = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    llama_memory_t mem = llama_get_memory(ctx);
    struct llama_batch batch = llama_batch_init(512, 0, 1);

    batch.n_tokens = 0;
    for (int i = 0; i < n_sys; i++) add(&batch, sys[i], i, 0, 0);
    if (llama_decode(ctx, batch) != 0) return 1;
    for (int k = 0; k < N_CLIENTS; k++) llama_memory_seq_cp(mem, 0, k + 1, -1, -1);

    llama_token reply[N_CLIENTS][N_GEN];
    int n_reply[N_CLIENTS] = {0}, running[N_CLIENTS] = {0}, i_batch[N_CLIENTS];
    llama_token pending[N_CLIENTS];
    for (int step = 0; step < 64; step++) {
        batch.n_tokens = 0;
        for (int k = 0; k < N_CLIENTS; k++) {
            i_batch[k] = -1;
            if (running[k]) {
                i_batch[k] = batch.n_tokens;
                add(&batch, pending[k], llama_memory_seq_pos_max(mem, k + 1) + 1, k + 1, 1);
            }
        }
        for (int k = 0; k < N_CLIENTS; k++) {
            if (START[k] != step) continue;
            llama_pos at = llama_memory_seq_pos_max(mem, k + 1) + 1;
            for (int j = 0; j < n_prompt[k]; j++) add(&batch, prompt[k][j], at + j, k + 1, j == n_prompt[k] - 1);
            i_batch[k] = batch.n_tokens - 1;
            running[k] = 1;
        }
        if (batch.n_tokens == 0) {
            if (step > START[N_CLIENTS - 1]) break;   /* every client has started and finished */
            continue;
        }
        if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed at step %d\n", step); return 1; }
        for (int k = 0; k < N_CLIENTS; k++) {
            if (i_batch[k] < 0) continue;
            llama_token t = argmax(llama_get_logits_ith(ctx, i_batch[k]), n_vocab);
            if (n_reply[k] == N_GEN || llama_vocab_is_eog(vocab, t)) {
                running[k] = 0;
                llama_memory_seq_rm(mem, k + 1, -1, -1);   /* the client is done */
                continue;
            }
            reply[k][n_reply[k]++] = pending[k] = t;
        }
    }

    /* Each client alone: a context of one sequence, the same tokens. */
    int failed = 0, generated = 0;
    for (int k = 0; k < N_CLIENTS; k++) {
        struct llama_context_params one = llama_context_default_params();
        one.n_ctx = 512;
        struct llama_context *c = llama_init_from_model(model, one);
        if (!c) return 1;
        batch.n_tokens = 0;
        for (int i = 0; i < n_sys; i++) add(&batch, sys[i], i, 0, 0);
        for (int j = 0; j < n_prompt[k]; j++) add(&batch, prompt[k][j], n_sys + j, 0, j == n_prompt[k] - 1);
        if (llama_decode(c, batch) != 0) return 1;
        int n = 0, same = 1;
        for (;;) {
            llama_token t = argmax(llama_get_logits_ith(c, -1), n_vocab);
            if (n == N_GEN || llama_vocab_is_eog(vocab, t)) break;
            if (n >= n_reply[k] || reply[k][n] != t) same = 0;
            n++;
            batch.n_tokens = 0;
            add(&batch, t, n_sys + n_prompt[k] + n - 1, 0, 1);
            if (llama_decode(c, batch) != 0) return 1;
        }
        if (n != n_reply[k]) same = 0;
        char text[1024]; int len = 0;
        for (int i = 0; i < n_reply[k]; i++) {
            int w = llama_token_to_piece(vocab, reply[k][i], text + len, (int)sizeof text - len - 1, 0, 0);
            if (w > 0) len += w;
        }
        text[len] = 0;
        printf("client %d (%d tokens, %s):%s\n", k, n_reply[k], same ? "as alone" : "DIFFERS from alone", text);
        failed |= !same;
        generated += n_reply[k];
        llama_free(c);
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    if (generated == 0) { fprintf(stderr, "no client generated a token\n"); return 1; }
    return failed;
}
