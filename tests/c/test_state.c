/* Session state through the C API, across processes: `write` steps a prompt, saves a snapshot
 * and the logits of the following step to files; `read` (a new process) restores the snapshot
 * into a fresh session and must get the same logits bit for bit. Also: truncate, verify with
 * an n-gram drafter, a corrupted snapshot refused with the session unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "packlm.h"
#include "check.h"

#define OK(call) CHECK((call) == PACKLM_OK, "%s failed", #call)

static const uint32_t prompt[] = {0, 39, 237, 74, 257, 205, 135, 146, 131, 73, 39, 237, 74};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0], NEXT = 11 };

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n;
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_state write|read MODEL_DIR OUT_PREFIX\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2], *prefix = argv[3];
    char snap_path[4096], logits_path[4096];
    snprintf(snap_path, sizeof snap_path, "%s.snap", prefix);
    snprintf(logits_path, sizeof logits_path, "%s.logits", prefix);

    packlm_model *model = NULL;
    if (packlm_model_open(dir, NULL, &model) != PACKLM_OK) {
        fprintf(stderr, "open: %s\n", packlm_last_error());
        return 1;
    }
    packlm_info info = {.size = sizeof info};
    OK(packlm_model_info(model, &info));
    size_t nv = info.n_vocab;
    float *logits = malloc(sizeof(float) * nv), *other = malloc(sizeof(float) * nv);
    packlm_session *s = NULL;
    OK(packlm_session_new(model, NULL, &s));

    if (strcmp(mode, "write") == 0) {
        OK(packlm_step_batch(s, prompt, N_PROMPT, PACKLM_WANT_NONE, NULL));
        size_t need = 0;
        CHECK(packlm_snapshot(s, NULL, 0, &need) == PACKLM_ERR_BUFFER_TOO_SMALL && need > 0, "snapshot size query");
        uint8_t *snap = malloc(need);
        size_t got = 0;
        OK(packlm_snapshot(s, snap, need, &got));
        CHECK(got == need, "snapshot size %zu vs %zu", got, need);
        OK(packlm_step(s, NEXT, logits));
        CHECK(write_file(snap_path, snap, need) && write_file(logits_path, logits, sizeof(float) * nv), "write files");

        /* Truncate back and step again: the same bits. */
        OK(packlm_truncate(s, N_PROMPT));
        OK(packlm_step(s, NEXT, other));
        CHECK(memcmp(logits, other, sizeof(float) * nv) == 0, "truncate then step differs");
        CHECK(packlm_truncate(s, 1000) == PACKLM_ERR_INVALID_ARGUMENT, "truncate past the end");

        /* Verify with an n-gram draft: the prompt repeats "39 237 74", so a draft exists. */
        OK(packlm_truncate(s, N_PROMPT - 1));
        packlm_drafter *d = NULL;
        OK(packlm_drafter_new_ngram(3, &d));
        uint32_t draft[4];
        size_t nd = 0;
        OK(packlm_drafter_propose(d, s, prompt[N_PROMPT - 1], 4, draft, &nd));
        CHECK(nd == 4 && draft[0] == 257 && draft[1] == 205, "ngram draft %zu: %u %u", nd, draft[0], draft[1]);
        packlm_verify_params vp = {.size = sizeof vp, .mode = PACKLM_VERIFY_GREEDY};
        packlm_verify_result vr = {.size = sizeof vr, .logits_out = other};
        OK(packlm_verify(s, prompt[N_PROMPT - 1], draft, nd, &vp, &vr));
        size_t past = 0;
        packlm_session_n_past(s, &past);
        CHECK(past == N_PROMPT + vr.n_accepted, "n_past %zu after accepting %u", past, vr.n_accepted);
        CHECK(vr.rounds == 1 && vr.drafted == nd && vr.accepted == vr.n_accepted, "counters");
        packlm_drafter_free(d);

        /* A corrupted snapshot is refused and the session is unchanged. */
        snap[need / 2] ^= 0x40;
        CHECK(packlm_restore(s, snap, need) == PACKLM_ERR_SNAPSHOT, "corrupt snapshot accepted");
        size_t past2 = 0;
        packlm_session_n_past(s, &past2);
        CHECK(past2 == past, "session changed by a failed restore");
        CHECK(packlm_restore(s, snap, 10) == PACKLM_ERR_SNAPSHOT, "short snapshot accepted");
        free(snap);
    } else {
        size_t n = 0, nl = 0;
        uint8_t *snap = read_file(snap_path, &n);
        float *want = read_file(logits_path, &nl);
        CHECK(snap && want && nl == sizeof(float) * nv, "read files");
        if (snap && want) {
            OK(packlm_restore(s, snap, n));
            size_t past = 0;
            packlm_session_n_past(s, &past);
            CHECK(past == N_PROMPT, "restored n_past %zu", past);
            OK(packlm_step(s, NEXT, logits));
            CHECK(memcmp(logits, want, sizeof(float) * nv) == 0, "restored session's logits differ from the writer's");
        }
        free(snap);
        free(want);
    }
    packlm_session_free(s);
    packlm_model_free(model);
    free(logits);
    free(other);
    printf("%s: %d passed, %d failed\n", mode, checks - failures, failures);
    return failures ? 1 : 0;
}
