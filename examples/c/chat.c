/* A one-turn chat that streams its reply through packlm_detokenizer.
 * Usage: chat MODEL [PROMPT] [MAX_TOKENS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <packlm.h>

static int fail(const char *call, packlm_status st) {
    fprintf(stderr, "error %u: %s: %s\n", (unsigned)st, call, packlm_last_error());
    return 1;
}

static uint32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [PROMPT] [MAX_TOKENS]\n", argv[0]);
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "What is the capital of France?";
    int max_tokens = argc > 3 ? atoi(argv[3]) : 64;
    packlm_model *model = NULL;
    packlm_status st = packlm_model_open(argv[1], NULL, &model);
    if (st) return fail("open", st);
    packlm_info info = {0};
    info.size = sizeof info;
    packlm_model_info(model, &info);

    /* The chat template when the pack has one, else the prompt as it is. */
    char text[4096];
    size_t n = 0;
    if (info.has_chat_template) {
        packlm_chat_message msg = {"user", prompt};
        if ((st = packlm_chat_apply(model, &msg, 1, 1, text, sizeof text, &n))) return fail("chat", st);
    } else {
        snprintf(text, sizeof text, "%s", prompt);
        n = strlen(text);
    }
    uint32_t ids[1024], stop[16];
    size_t n_ids = 0, n_stop = 0;
    if ((st = packlm_tokenize(model, text, n, PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL, ids, 1024, &n_ids))) return fail("tokenize", st);
    if ((st = packlm_model_stop_tokens(model, stop, 16, &n_stop))) return fail("stop tokens", st);

    packlm_session *session = NULL;
    packlm_detokenizer *stream = NULL;
    float *logits = malloc(sizeof(float) * info.n_vocab);
    if (!logits) return 1;
    if ((st = packlm_session_new(model, NULL, &session))) return fail("session", st);
    if ((st = packlm_detokenizer_new(model, PACKLM_DETOKENIZE_SKIP_SPECIAL, &stream))) return fail("detokenizer", st);
    if ((st = packlm_step_batch(session, ids, n_ids, PACKLM_WANT_LAST, logits))) return fail("prefill", st);
    char piece[256];
    for (int i = 0; i < max_tokens; i++) {
        uint32_t tok = argmax(logits, info.n_vocab);
        int is_stop = 0;
        for (size_t k = 0; k < n_stop; k++) is_stop |= stop[k] == tok;
        if (is_stop) break;
        if ((st = packlm_detokenizer_feed(stream, tok, piece, sizeof piece, &n))) return fail("feed", st);
        fputs(piece, stdout);
        fflush(stdout);
        if ((st = packlm_step(session, tok, logits))) return fail("step", st);
    }
    if ((st = packlm_detokenizer_flush(stream, piece, sizeof piece, &n))) return fail("flush", st);
    printf("%s\n", piece);
    packlm_detokenizer_free(stream);
    packlm_session_free(session);
    packlm_model_free(model);
    free(logits);
    return 0;
}
