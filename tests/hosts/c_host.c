/* The C host of the cross-host test (protocol: tests/hosts/README.md).
 *   c_host write MODEL DIR        prefill the fixed prompt; write state.bin, next.f32, greedy.txt
 *   c_host check MODEL DIR        restore state.bin, step 5, compare; write state_c.bin
 *   c_host chain MODEL DIR FROM   restore state_FROM.bin, continue greedily, compare */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"

#define PROMPT "The quick brown fox jumps over the lazy dog."
#define NEXT_TOKEN 5
#define N_GREEDY 8

static int passed = 0, failed = 0;

static void check(int cond, const char *what) {
    if (cond) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "c: FAIL: %s\n", what);
    }
}

/* A failed call ends the host with its status and message. */
static void ok(packlm_status st, const char *call) {
    if (st != PACKLM_OK) {
        fprintf(stderr, "c: %s: %s: %s\n", call, packlm_status_str((int32_t)st), packlm_last_error());
        exit(1);
    }
}

static char *path_of(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) exit(1);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static uint8_t *read_file(const char *dir, const char *name, size_t *len) {
    char *path = path_of(dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "c: cannot read %s\n", path); exit(1); }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) { fprintf(stderr, "c: short read of %s\n", path); exit(1); }
    fclose(f);
    free(path);
    *len = (size_t)size;
    return buf;
}

static void write_file(const char *dir, const char *name, const void *data, size_t len) {
    char *path = path_of(dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) { fprintf(stderr, "c: cannot write %s\n", path); exit(1); }
    free(path);
}

/* The largest logit, ties to the lowest id. */
static uint32_t argmax(const float *logits, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static uint8_t *snapshot(packlm_session *s, size_t *len) {
    size_t need = 0;
    packlm_status st = packlm_snapshot(s, NULL, 0, &need);
    if (st != PACKLM_ERR_BUFFER_TOO_SMALL) ok(st, "packlm_snapshot");
    uint8_t *buf = malloc(need);
    if (!buf) exit(1);
    ok(packlm_snapshot(s, buf, need, len), "packlm_snapshot");
    return buf;
}

static packlm_session *restored(packlm_model *m, const char *dir, const char *name) {
    size_t len = 0;
    uint8_t *bytes = read_file(dir, name, &len);
    packlm_session *s = NULL;
    ok(packlm_session_new(m, NULL, &s), "packlm_session_new");
    ok(packlm_restore(s, bytes, len), "packlm_restore");
    free(bytes);
    return s;
}

static void read_greedy(const char *dir, uint32_t *ids) {
    size_t len = 0;
    char *text = (char *)read_file(dir, "greedy.txt", &len);
    char *end = text + len, *p = text;
    for (int i = 0; i < N_GREEDY; i++) {
        char *next = NULL;
        unsigned long v = strtoul(p, &next, 10);
        if (next == p || next > end) { fprintf(stderr, "c: greedy.txt: fewer than %d ids\n", N_GREEDY); exit(1); }
        ids[i] = (uint32_t)v;
        p = next;
    }
    free(text);
}

int main(int argc, char **argv) {
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) { fprintf(stderr, "c: the .f32 files are little-endian; this machine is not\n"); return 1; }
    if (argc < 4 || (strcmp(argv[1], "chain") == 0 && argc != 5)) {
        fprintf(stderr, "usage: c_host write|check MODEL DIR | chain MODEL DIR FROM\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argv[3];
    packlm_model *m = NULL;
    ok(packlm_model_open(argv[2], NULL, &m), "packlm_model_open");
    packlm_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    ok(packlm_model_info(m, &info), "packlm_model_info");
    const uint32_t nv = info.n_vocab;
    float *logits = malloc(sizeof(float) * nv);
    if (!logits) return 1;
    uint32_t greedy[N_GREEDY];

    if (strcmp(mode, "write") == 0) {
        uint32_t ids[256];
        size_t n = 0;
        ok(packlm_tokenize(m, PROMPT, strlen(PROMPT), PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL, ids, 256, &n), "packlm_tokenize");
        packlm_session *s = NULL;
        ok(packlm_session_new(m, NULL, &s), "packlm_session_new");
        ok(packlm_step_batch(s, ids, n, PACKLM_WANT_LAST, logits), "packlm_step_batch");
        size_t len = 0;
        uint8_t *state = snapshot(s, &len);
        write_file(dir, "state.bin", state, len);
        free(state);
        ok(packlm_step(s, NEXT_TOKEN, logits), "packlm_step");
        write_file(dir, "next.f32", logits, sizeof(float) * nv);
        char text[N_GREEDY * 12 + 1];
        size_t at = 0;
        for (int i = 0; i < N_GREEDY; i++) {
            greedy[i] = argmax(logits, nv);
            at += (size_t)snprintf(text + at, sizeof text - at, "%u\n", greedy[i]);
            ok(packlm_step(s, greedy[i], logits), "packlm_step");
        }
        write_file(dir, "greedy.txt", text, at);
        packlm_session_free(s);
        check(1, "written");
    } else if (strcmp(mode, "check") == 0) {
        read_greedy(dir, greedy);
        size_t len = 0;
        float *want = (float *)read_file(dir, "next.f32", &len);
        check(len == sizeof(float) * nv, "next.f32 holds n_vocab floats");
        packlm_session *s = restored(m, dir, "state.bin");
        ok(packlm_step(s, NEXT_TOKEN, logits), "packlm_step");
        check(len == sizeof(float) * nv && memcmp(want, logits, len) == 0, "logits after restore + step 5 are next.f32, bit for bit");
        uint8_t *state = snapshot(s, &len);
        write_file(dir, "state_c.bin", state, len);
        free(state);
        for (int i = 0; i < N_GREEDY; i++) {
            uint32_t t = argmax(logits, nv);
            char what[64];
            snprintf(what, sizeof what, "greedy token %d is %u (got %u)", i, greedy[i], t);
            check(t == greedy[i], what);
            ok(packlm_step(s, greedy[i], logits), "packlm_step");
        }
        free(want);
        packlm_session_free(s);
    } else if (strcmp(mode, "chain") == 0) {
        read_greedy(dir, greedy);
        char name[64];
        snprintf(name, sizeof name, "state_%s.bin", argv[4]);
        packlm_session *base = restored(m, dir, "state.bin");
        packlm_session *s = restored(m, dir, name);
        size_t n_base = 0, n_from = 0;
        ok(packlm_session_n_past(base, &n_base), "packlm_session_n_past");
        ok(packlm_session_n_past(s, &n_from), "packlm_session_n_past");
        check(n_from == n_base + 1, "the snapshot holds state.bin's positions and token 5");
        for (int i = 0; i + 1 < N_GREEDY; i++) {
            ok(packlm_step(s, greedy[i], logits), "packlm_step");
            uint32_t t = argmax(logits, nv);
            char what[64];
            snprintf(what, sizeof what, "greedy token %d is %u (got %u)", i + 1, greedy[i + 1], t);
            check(t == greedy[i + 1], what);
        }
        packlm_session_free(base);
        packlm_session_free(s);
    } else {
        fprintf(stderr, "c: unknown mode %s\n", mode);
        return 2;
    }
    free(logits);
    packlm_model_free(m);
    printf("c: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
