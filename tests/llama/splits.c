// A model split by gguf-split (tests/llama/split_gguf.py) through the facade, as a program built
// against llama.cpp's llama.h opens one: llama_model_load_from_file on the first split and
// llama_model_load_from_splits on the list give the whole file's logits, bit for bit; a list
// out of order, a short list or a later split alone give NULL. SUPPRESSED.gguf is the whole file
// with tokenizer.ggml.suppress_tokens = [5, 7, -1, 99999999]: llama_vocab_get_suppress_tokens
// gives 5 and 7 (llama-vocab.cpp drops ids outside the vocabulary), the plain file none.
//   splits WHOLE.gguf FIRST.gguf SECOND.gguf THIRD.gguf SUPPRESSED.gguf
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int failures = 0;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); failures++; } } while (0)

// The last position's logits after decoding a fixed prompt, copied (NULL on failure).
static float * logits_of(struct llama_model * m, int * n_vocab) {
    if (!m) return NULL;
    *n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    struct llama_context * ctx = llama_init_from_model(m, cp);
    if (!ctx) return NULL;
    llama_token toks[6] = {1, 504, 3458, 282, 4566, 314};
    float * out = NULL;
    if (llama_decode(ctx, llama_batch_get_one(toks, 6)) == 0) {
        out = malloc(sizeof(float) * (size_t)*n_vocab);
        memcpy(out, llama_get_logits_ith(ctx, -1), sizeof(float) * (size_t)*n_vocab);
    }
    llama_free(ctx);
    return out;
}

int main(int argc, char ** argv) {
    if (argc != 6) { fprintf(stderr, "usage: splits WHOLE FIRST SECOND THIRD SUPPRESSED\n"); return 2; }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    int nv = 0, nv2 = 0;
    struct llama_model * whole = llama_model_load_from_file(argv[1], mp);
    CHECK(whole != NULL, "the whole file opens");
    float * want = logits_of(whole, &nv);
    CHECK(want != NULL, "the whole file decodes");

    struct llama_model * first = llama_model_load_from_file(argv[2], mp);
    CHECK(first != NULL, "the first split opens as the model");
    float * got = logits_of(first, &nv2);
    CHECK(got && want && nv2 == nv && memcmp(got, want, sizeof(float) * (size_t)nv) == 0, "first split's logits == the whole file's");
    free(got);

    const char * list[3] = {argv[2], argv[3], argv[4]};
    struct llama_model * listed = llama_model_load_from_splits(list, 3, mp);
    CHECK(listed != NULL, "the listed splits open");
    got = logits_of(listed, &nv2);
    CHECK(got && want && nv2 == nv && memcmp(got, want, sizeof(float) * (size_t)nv) == 0, "listed splits' logits == the whole file's");
    free(got);

    const char * swapped[3] = {argv[2], argv[4], argv[3]};
    CHECK(llama_model_load_from_splits(swapped, 3, mp) == NULL, "splits out of order are refused");
    CHECK(llama_model_load_from_splits(list, 2, mp) == NULL, "a short list is refused");
    CHECK(llama_model_load_from_splits(NULL, 0, mp) == NULL, "no list is refused");
    CHECK(llama_model_load_from_file(argv[3], mp) == NULL, "a later split alone is refused");

    int32_t n_sup = -1;
    const llama_token * sup = llama_vocab_get_suppress_tokens(llama_model_get_vocab(whole), &n_sup);
    CHECK(sup == NULL && n_sup == 0, "no suppress list in the plain file (got %d)", n_sup);
    struct llama_model * suppressed = llama_model_load_from_file(argv[5], mp);
    CHECK(suppressed != NULL, "the file with a suppress list opens");
    if (suppressed) {
        sup = llama_vocab_get_suppress_tokens(llama_model_get_vocab(suppressed), &n_sup);
        CHECK(sup != NULL && n_sup == 2 && sup[0] == 5 && sup[1] == 7, "suppress list 5, 7 (got %d ids)", n_sup);
        llama_model_free(suppressed);
    }

    free(want);
    llama_model_free(listed);
    llama_model_free(first);
    llama_model_free(whole);
    llama_backend_free();
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("splits: ok\n");
    return 0;
}
