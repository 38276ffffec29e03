/* The write step of the cross-host state test (tests/hosts/README.md), for running the Go and
 * Swift hosts alone (tests/hosts/go_swift.sh): opens MODEL, tokenizes a fixed prompt, prefills
 * it with packlm_step_batch, writes DIR/state.bin, steps token 5 and writes DIR/next.f32
 * (n_vocab little-endian f32), then continues greedily 8 tokens (argmax, ties to the lowest id)
 * and writes DIR/greedy.txt (one id per line).
 *
 *   write_state MODEL DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"

static const char PROMPT[] = "The quick brown fox jumps over the lazy dog.";

static void die(const char *what) {
    fprintf(stderr, "write_state: %s: %s\n", what, packlm_last_error());
    exit(1);
}

static void write_file(const char *dir, const char *name, const void *data, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "write_state: cannot write %s\n", path);
        exit(1);
    }
}

static uint32_t argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (uint32_t)best;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: write_state MODEL DIR\n");
        return 2;
    }
    packlm_model *model;
    if (packlm_model_open(argv[1], NULL, &model) != PACKLM_OK) die("open");
    packlm_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (packlm_model_info(model, &info) != PACKLM_OK) die("info");
    uint32_t tokens[256];
    size_t n;
    if (packlm_tokenize(model, PROMPT, strlen(PROMPT), PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL,
                        tokens, 256, &n) != PACKLM_OK)
        die("tokenize");
    packlm_session *s;
    if (packlm_session_new(model, NULL, &s) != PACKLM_OK) die("session");
    float *logits = malloc(sizeof(float) * info.n_vocab);
    if (!logits) return 1;
    if (packlm_step_batch(s, tokens, n, PACKLM_WANT_NONE, NULL) != PACKLM_OK) die("prefill");
    size_t need;
    if (packlm_snapshot(s, NULL, 0, &need) != PACKLM_ERR_BUFFER_TOO_SMALL) die("snapshot size");
    uint8_t *snap = malloc(need);
    if (!snap) return 1;
    if (packlm_snapshot(s, snap, need, &need) != PACKLM_OK) die("snapshot");
    write_file(argv[2], "state.bin", snap, need);
    if (packlm_step(s, 5, logits) != PACKLM_OK) die("step 5");
    /* The file is little-endian: every target packlm builds for is. */
    write_file(argv[2], "next.f32", logits, sizeof(float) * info.n_vocab);
    char text[256];
    size_t len = 0;
    for (int i = 0; i < 8; i++) {
        uint32_t t = argmax(logits, info.n_vocab);
        len += (size_t)snprintf(text + len, sizeof text - len, "%u\n", t);
        if (i < 7 && packlm_step(s, t, logits) != PACKLM_OK) die("greedy step");
    }
    write_file(argv[2], "greedy.txt", text, len);
    free(snap);
    free(logits);
    packlm_session_free(s);
    packlm_model_free(model);
    return 0;
}
