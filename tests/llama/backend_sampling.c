/* Backend sampling (llama.h's [EXPERIMENTAL] llama_set_sampler, the context params' samplers
 * and llama_get_sampled_*_ith) on libllama.so with SmolLM2-135M-Instruct, each result checked
 * against what llama.h documents and llama.cpp's llama-context.cpp / llama-sampler.cpp do:
 *   - a greedy chain attached to sequence 0 selects, at llama_decode, the argmax of the row's
 *     logits, the token llama_sampler_sample gives on the same logits in a context with no
 *     chain attached; the row keeps the whole logits row (count n_vocab), no probabilities
 *     and no candidates (count 0, the candidates pointer then the vocabulary's ids 0..n-1);
 *   - top-k 40, temp 0.8, dist (seed 1234), attached through llama_context_params.samplers:
 *     40 candidates, the 40 largest logits, each scaled by 1/0.8; 40 probabilities summing to
 *     1 and equal to softmax of those; the sampled token one of them and the token the same
 *     chain samples on the host from the raw logits (same seed);
 *   - llama_sampler_sample returns the token the attached chain selected;
 *   - a second output row of a sampled sequence is refused (-1; n_outputs_max_per_seq is 1);
 *   - a sampler that is not a chain is not attached (false), NULL detaches (true), a seq_id
 *     outside the context is refused; after detaching, a decode has no results (token
 *     LLAMA_TOKEN_NULL, logits count n_vocab, probs count 0), as llama.cpp;
 *   - a context whose params carry a sampler that is not a chain is refused (NULL).
 *
 *   backend_sampling MODEL.gguf
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "log_capture.h"

#define CHECK(cond) do { if (!(cond)) check_failed(#cond, __FILE__, __LINE__); } while (0)

static const char *PROMPT = "The capital of France is";

static int n_prompt;
static llama_token prompt[32];

static struct llama_context *context(struct llama_model *m, struct llama_sampler_seq_config *cfg, size_t n_cfg) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.samplers = cfg;
    cp.n_samplers = n_cfg;
    return llama_init_from_model(m, cp);
}

static llama_token argmax(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (row[i] > row[best]) best = i;
    return best;
}

static int desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static struct llama_sampler *top_k_temp_dist(void) {
    struct llama_sampler *c = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(c, llama_sampler_init_top_k(40));
    llama_sampler_chain_add(c, llama_sampler_init_temp(0.8f));
    llama_sampler_chain_add(c, llama_sampler_init_dist(1234));
    return c;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: backend_sampling MODEL.gguf\n");
        return 2;
    }
    llama_log_set(on_log, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    CHECK(model != NULL);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    n_prompt = llama_tokenize(vocab, PROMPT, (int32_t)strlen(PROMPT), prompt, 32, false, true);
    CHECK(n_prompt == 5);

    /* The raw logits and the host's greedy and top-k/temp/dist choices, with no chain attached. */
    struct llama_context *plain = context(model, NULL, 0);
    CHECK(plain != NULL);
    CHECK(llama_decode(plain, llama_batch_get_one(prompt, n_prompt)) == 0);
    float *raw = malloc(sizeof(float) * n_vocab);
    memcpy(raw, llama_get_logits_ith(plain, -1), sizeof(float) * n_vocab);
    struct llama_sampler *greedy_host = llama_sampler_init_greedy();
    llama_token host_greedy = llama_sampler_sample(greedy_host, plain, -1);
    struct llama_sampler *dist_host = top_k_temp_dist();
    llama_token host_dist = llama_sampler_sample(dist_host, plain, -1);
    CHECK(host_greedy == argmax(raw, n_vocab));
    /* With no chain attached to the last decode: no results (llama.cpp's values). */
    CHECK(llama_get_sampled_token_ith(plain, -1) == LLAMA_TOKEN_NULL);
    CHECK(llama_get_sampled_probs_ith(plain, -1) == NULL && llama_get_sampled_probs_count_ith(plain, -1) == 0);
    CHECK(llama_get_sampled_logits_ith(plain, -1) == NULL && llama_get_sampled_logits_count_ith(plain, -1) == (uint32_t)n_vocab);
    CHECK(llama_get_sampled_candidates_count_ith(plain, -1) == 0);
    const llama_token *ids = llama_get_sampled_candidates_ith(plain, -1);
    CHECK(ids != NULL && ids[0] == 0 && ids[n_vocab - 1] == n_vocab - 1);

    /* A greedy chain on sequence 0, attached with llama_set_sampler. */
    struct llama_context *ctx = context(model, NULL, 0);
    CHECK(ctx != NULL);
    struct llama_sampler *greedy = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(greedy, llama_sampler_init_greedy());
    CHECK(llama_set_sampler(ctx, 0, greedy));
    CHECK(llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) == 0);
    CHECK(llama_get_sampled_token_ith(ctx, -1) == host_greedy);
    CHECK(llama_get_sampled_token_ith(ctx, n_prompt - 1) == host_greedy);
    log_reset();
    CHECK(llama_get_sampled_token_ith(ctx, 0) == LLAMA_TOKEN_NULL);
    CHECK(logged("llama_get_sampled_token_ith"));
    CHECK(llama_get_sampled_logits_count_ith(ctx, -1) == (uint32_t)n_vocab);
    CHECK(memcmp(llama_get_sampled_logits_ith(ctx, -1), raw, sizeof(float) * n_vocab) == 0);
    CHECK(llama_get_sampled_probs_ith(ctx, -1) == NULL && llama_get_sampled_probs_count_ith(ctx, -1) == 0);
    CHECK(llama_get_sampled_candidates_count_ith(ctx, -1) == 0);
    ids = llama_get_sampled_candidates_ith(ctx, -1);
    CHECK(ids != NULL && ids[1] == 1 && ids[n_vocab - 1] == n_vocab - 1);
    /* llama_sampler_sample gives the token the chain selected (llama-sampler.cpp). */
    struct llama_sampler *any = llama_sampler_init_dist(99);
    CHECK(llama_sampler_sample(any, ctx, -1) == host_greedy);
    llama_sampler_free(any);
    /* Two output rows of sequence 0 in one batch: more than n_outputs_max_per_seq (1). */
    struct llama_batch b = llama_batch_init(2, 0, 1);
    for (int i = 0; i < 2; i++) {
        b.token[i] = prompt[i];
        b.pos[i] = n_prompt + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = 2;
    log_reset();
    CHECK(llama_decode(ctx, b) == -1);
    CHECK(logged("at most 1 outputs per sequence"));
    llama_batch_free(b);
    /* Not a chain: not attached; outside the context: refused; NULL detaches. */
    struct llama_sampler *lone = llama_sampler_init_greedy();
    log_reset();
    CHECK(!llama_set_sampler(ctx, 0, lone));
    CHECK(logged("cannot be offloaded"));
    log_reset();
    CHECK(!llama_set_sampler(ctx, 7, greedy));
    CHECK(logged("seq_id 7"));
    CHECK(llama_set_sampler(ctx, 0, NULL));
    llama_token t = host_greedy;
    CHECK(llama_decode(ctx, llama_batch_get_one(&t, 1)) == 0);
    CHECK(llama_get_sampled_token_ith(ctx, -1) == LLAMA_TOKEN_NULL);
    CHECK(llama_get_sampled_logits_count_ith(ctx, -1) == (uint32_t)n_vocab && llama_get_sampled_probs_count_ith(ctx, -1) == 0);
    llama_free(ctx);
    llama_sampler_free(greedy);

    /* top-k 40, temp 0.8, dist through the context params. */
    struct llama_sampler *chain = top_k_temp_dist();
    struct llama_sampler_seq_config cfg = {0, chain};
    ctx = context(model, &cfg, 1);
    CHECK(ctx != NULL);
    CHECK(llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) == 0);
    CHECK(llama_get_sampled_candidates_count_ith(ctx, -1) == 40);
    CHECK(llama_get_sampled_logits_count_ith(ctx, -1) == 40 && llama_get_sampled_probs_count_ith(ctx, -1) == 40);
    ids = llama_get_sampled_candidates_ith(ctx, -1);
    const float *logits = llama_get_sampled_logits_ith(ctx, -1);
    const float *probs = llama_get_sampled_probs_ith(ctx, -1);
    CHECK(ids != NULL && logits != NULL && probs != NULL);
    float *sorted = malloc(sizeof(float) * n_vocab);
    memcpy(sorted, raw, sizeof(float) * n_vocab);
    qsort(sorted, n_vocab, sizeof(float), desc);
    double sum = 0, z = 0;
    float max = -INFINITY;
    for (int i = 0; i < 40; i++) {
        CHECK(ids[i] >= 0 && ids[i] < n_vocab && raw[ids[i]] >= sorted[39]);
        for (int j = 0; j < i; j++) CHECK(ids[j] != ids[i]);
        CHECK(logits[i] == raw[ids[i]] * (1.0f / 0.8f));
        if (logits[i] > max) max = logits[i];
        sum += probs[i];
    }
    CHECK(fabs(sum - 1.0) < 1e-5);
    for (int i = 0; i < 40; i++) z += exp((double)logits[i] - max);
    for (int i = 0; i < 40; i++) CHECK(fabs(probs[i] - exp((double)logits[i] - max) / z) < 1e-6);
    llama_token sampled = llama_get_sampled_token_ith(ctx, -1);
    bool among = false;
    for (int i = 0; i < 40; i++) among = among || ids[i] == sampled;
    CHECK(among);
    CHECK(sampled == host_dist);
    CHECK(llama_sampler_sample(chain, ctx, -1) == sampled);
    llama_free(ctx);
    llama_sampler_free(chain);

    /* A sampler that is not a chain in the params: the context is refused. */
    struct llama_sampler_seq_config bad = {0, lone};
    log_reset();
    CHECK(context(model, &bad, 1) == NULL);
    CHECK(logged("llama_sampler_chain"));
    llama_sampler_free(lone);

    llama_sampler_free(greedy_host);
    llama_sampler_free(dist_host);
    llama_free(plain);
    free(raw);
    free(sorted);
    llama_model_free(model);
    printf("backend_sampling: greedy and top-k/temp/dist chains at decode, as llama_sampler_sample on the host\n");
    return 0;
}
