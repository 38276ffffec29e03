/* A program written against llama.cpp's headers (llama.h, ggml.h, ggml-backend.h, ggml-cpu.h
 * of the llama.cpp in llama-cpp-python 0.3.36) as applications use ggml at start-up: load the
 * backends, list the devices, report the CPU's features and the KV cache's type sizes, time
 * things, set the log and abort callbacks. Linked -lllama -lggml -lggml-base against the facade
 * folder by tests/llama/examples.sh, it asserts what ggml documents of each function, against
 * references of its own: the type table's values written from ggml.c's type_traits and
 * ggml-common.h's block structs, the CPU flags of /proc/cpuinfo, the monotonic clock, sysconf.
 *
 *   ggml_app            every check; prints "ggml_app: N checks passed", exit 0, or the
 *                       failures on stderr and exit 1
 *   ggml_app abort      prints on stdout the message GGML_ABORT must print, then calls it with
 *                       integer, string and double arguments, some past the argument registers
 *   ggml_app abort-cb   sets an abort callback that prints the message on stdout, then aborts
 */
#define _POSIX_C_SOURCE 200809L

#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int checks;
static int failures;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        checks++;                                                         \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

static int64_t monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void check_time(void) {
    ggml_time_init();
    int64_t before = monotonic_us();
    int64_t t0 = ggml_time_us();
    int64_t after = monotonic_us();
    /* ggml.c reads CLOCK_MONOTONIC: the value lies between two reads of it around the call. */
    CHECK(before <= t0 && t0 <= after, "ggml_time_us %lld outside [%lld, %lld]", (long long) t0, (long long) before, (long long) after);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    int64_t t1 = ggml_time_us();
    CHECK(t1 - t0 >= 20000, "ggml_time_us advanced %lld us over a 20 ms sleep", (long long) (t1 - t0));
    int64_t ms = ggml_time_ms();
    CHECK(ms >= t1 / 1000 && ms - t1 / 1000 < 1000, "ggml_time_ms %lld against ggml_time_us %lld", (long long) ms, (long long) t1);
}

/* Literal rows from ggml.c's type_traits (name, blck_size) and ggml-common.h's block structs
 * (type_size): the KV cache's types and a few weight types. */
static const struct {
    enum ggml_type type;
    const char * name;
    int64_t blck_size;
    size_t type_size;
    int quantized;
} type_rows[] = {
    {GGML_TYPE_F32, "f32", 1, 4, 0},
    {GGML_TYPE_F16, "f16", 1, 2, 0},
    {GGML_TYPE_BF16, "bf16", 1, 2, 0},
    {GGML_TYPE_Q8_0, "q8_0", 32, 34, 1},
    {GGML_TYPE_Q4_0, "q4_0", 32, 18, 1},
    {GGML_TYPE_Q4_1, "q4_1", 32, 20, 1},
    {GGML_TYPE_Q5_0, "q5_0", 32, 22, 1},
    {GGML_TYPE_Q5_1, "q5_1", 32, 24, 1},
    {GGML_TYPE_IQ4_NL, "iq4_nl", 32, 18, 1},
    {GGML_TYPE_Q4_K, "q4_K", 256, 144, 1},
    {GGML_TYPE_Q6_K, "q6_K", 256, 210, 1},
    {GGML_TYPE_I32, "i32", 1, 4, 0},
};

static void check_types(void) {
    for (size_t i = 0; i < sizeof type_rows / sizeof type_rows[0]; i++) {
        const char * name = ggml_type_name(type_rows[i].type);
        CHECK(name && strcmp(name, type_rows[i].name) == 0, "type %d is named %s", type_rows[i].type, name ? name : "(null)");
        CHECK(ggml_blck_size(type_rows[i].type) == type_rows[i].blck_size, "%s: blck_size %lld", type_rows[i].name, (long long) ggml_blck_size(type_rows[i].type));
        CHECK(ggml_type_size(type_rows[i].type) == type_rows[i].type_size, "%s: type_size %zu", type_rows[i].name, ggml_type_size(type_rows[i].type));
        CHECK(ggml_is_quantized(type_rows[i].type) == type_rows[i].quantized, "%s: is_quantized", type_rows[i].name);
    }
    /* ggml_type_sizef is deprecated in ggml.h (ggml_row_size instead); programs still call it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(ggml_type_sizef(GGML_TYPE_Q8_0) == 34.0 / 32, "q8_0: type_sizef %f", ggml_type_sizef(GGML_TYPE_Q8_0));
    CHECK(ggml_type_sizef(GGML_TYPE_F16) == 2.0, "f16: type_sizef %f", ggml_type_sizef(GGML_TYPE_F16));
#pragma GCC diagnostic pop
    /* A 4096-wide row: 128 blocks of 18 bytes in q4_0, 4096 x 2 bytes in f16. */
    CHECK(ggml_row_size(GGML_TYPE_Q4_0, 4096) == 2304, "q4_0 row of 4096: %zu", ggml_row_size(GGML_TYPE_Q4_0, 4096));
    CHECK(ggml_row_size(GGML_TYPE_F16, 4096) == 8192, "f16 row of 4096: %zu", ggml_row_size(GGML_TYPE_F16, 4096));
}

/* The first "flags" (x86) or "Features" (Arm) line of /proc/cpuinfo, with a space either side. */
static char cpu_flags[8192];

static void read_cpu_flags(void) {
    FILE * f = fopen("/proc/cpuinfo", "r");
    char line[sizeof cpu_flags - 2];
    strcpy(cpu_flags, " ");
    if (!f) {
        return;
    }
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) {
            char * colon = strchr(line, ':');
            if (colon) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(cpu_flags, sizeof cpu_flags, " %s ", colon + 1);
            }
            break;
        }
    }
    fclose(f);
}

static int has_flag(const char * flag) {
    char word[64];
    snprintf(word, sizeof word, " %s ", flag);
    return strstr(cpu_flags, word) != NULL;
}

static void check_cpu_features(void) {
    static const struct {
        const char * function;
        int (*has)(void);
        const char * x86_flag; /* NULL: not an x86 feature */
        const char * arm_flag; /* NULL: not an Arm feature */
    } rows[] = {
        {"sse3", ggml_cpu_has_sse3, "pni", NULL},
        {"ssse3", ggml_cpu_has_ssse3, "ssse3", NULL},
        {"avx", ggml_cpu_has_avx, "avx", NULL},
        {"avx_vnni", ggml_cpu_has_avx_vnni, "avx_vnni", NULL},
        {"avx2", ggml_cpu_has_avx2, "avx2", NULL},
        {"bmi2", ggml_cpu_has_bmi2, "bmi2", NULL},
        {"f16c", ggml_cpu_has_f16c, "f16c", NULL},
        {"fma", ggml_cpu_has_fma, "fma", NULL},
        {"avx512", ggml_cpu_has_avx512, "avx512f", NULL},
        {"avx512_vbmi", ggml_cpu_has_avx512_vbmi, "avx512vbmi", NULL},
        {"avx512_vnni", ggml_cpu_has_avx512_vnni, "avx512_vnni", NULL},
        {"avx512_bf16", ggml_cpu_has_avx512_bf16, "avx512_bf16", NULL},
        {"amx_int8", ggml_cpu_has_amx_int8, "amx_int8", NULL},
        {"neon", ggml_cpu_has_neon, NULL, "asimd"},
        {"arm_fma", ggml_cpu_has_arm_fma, NULL, "asimd"},
        {"fp16_va", ggml_cpu_has_fp16_va, NULL, "asimdhp"},
        {"dotprod", ggml_cpu_has_dotprod, NULL, "asimddp"},
        {"matmul_int8", ggml_cpu_has_matmul_int8, NULL, "i8mm"},
        {"sve", ggml_cpu_has_sve, NULL, "sve"},
        {"sme", ggml_cpu_has_sme, NULL, "sme"},
        {"sme2", ggml_cpu_has_sme2, NULL, "sme2"},
        {"riscv_v", ggml_cpu_has_riscv_v, NULL, NULL},
        {"vsx", ggml_cpu_has_vsx, NULL, NULL},
        {"vxe", ggml_cpu_has_vxe, NULL, NULL},
        {"wasm_simd", ggml_cpu_has_wasm_simd, NULL, NULL},
        {"llamafile", ggml_cpu_has_llamafile, NULL, NULL},
    };
    read_cpu_flags();
    CHECK(strlen(cpu_flags) > 2, "no flags line in /proc/cpuinfo");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
#if defined(__x86_64__)
        const char * flag = rows[i].x86_flag;
#elif defined(__aarch64__)
        const char * flag = rows[i].arm_flag;
#else
        const char * flag = NULL;
#endif
        int want = flag ? has_flag(flag) : 0;
        int got = rows[i].has();
        CHECK(got == want, "ggml_cpu_has_%s() is %d; /proc/cpuinfo %s '%s'", rows[i].function, got, want ? "has" : "lacks", flag ? flag : "-");
    }
    CHECK(ggml_cpu_get_rvv_vlen() == 0, "rvv_vlen %d", ggml_cpu_get_rvv_vlen());
    CHECK((ggml_cpu_get_sve_cnt() > 0) == (ggml_cpu_has_sve() != 0), "sve_cnt %d with has_sve %d", ggml_cpu_get_sve_cnt(), ggml_cpu_has_sve());
}

/* The "model name" of /proc/cpuinfo, trimmed, or "CPU" (ggml-cpu's device description). */
static void cpu_model_name(char * out, size_t size) {
    char line[1024];
    FILE * f = fopen("/proc/cpuinfo", "r");
    snprintf(out, size, "CPU");
    while (f && fgets(line, sizeof line, f)) {
        char * colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            char * p = colon + 1;
            while (*p == ' ' || *p == '\t') {
                p++;
            }
            p[strcspn(p, "\n")] = '\0';
            for (size_t n = strlen(p); n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'); n--) {
                p[n - 1] = '\0';
            }
            if (*p) {
                snprintf(out, size, "%s", p);
            }
            break;
        }
    }
    if (f) {
        fclose(f);
    }
}

static void check_backends(void) {
    ggml_backend_load_all();
    CHECK(ggml_backend_reg_count() == 1, "%zu backends", ggml_backend_reg_count());
    ggml_backend_reg_t reg = ggml_backend_reg_get(0);
    CHECK(reg != NULL, "no backend 0");
    CHECK(ggml_backend_reg_get(1) == NULL, "a backend past the last");
    CHECK(reg && strcmp(ggml_backend_reg_name(reg), "CPU") == 0, "backend 0 is %s", reg ? ggml_backend_reg_name(reg) : "(null)");
    CHECK(ggml_backend_reg_by_name("cpu") == reg, "by name, without case");
    CHECK(ggml_backend_reg_by_name("CUDA") == NULL, "a CUDA backend");
    CHECK(ggml_backend_cpu_reg() == reg, "ggml_backend_cpu_reg is not backend 0");
    CHECK(ggml_backend_reg_dev_count(reg) == 1, "%zu devices in the CPU backend", ggml_backend_reg_dev_count(reg));

    CHECK(ggml_backend_dev_count() == 1, "%zu devices", ggml_backend_dev_count());
    ggml_backend_dev_t dev = ggml_backend_dev_get(0);
    CHECK(dev != NULL && dev == ggml_backend_reg_dev_get(reg, 0), "device 0 is not the CPU backend's device 0");
    CHECK(ggml_backend_dev_get(1) == NULL, "a device past the last");
    CHECK(dev && strcmp(ggml_backend_dev_name(dev), "CPU") == 0, "device 0 is %s", dev ? ggml_backend_dev_name(dev) : "(null)");
    CHECK(ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU, "device type %d", (int) ggml_backend_dev_type(dev));
    CHECK(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU) == dev, "by type CPU");
    CHECK(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU) == NULL, "a GPU device");
    CHECK(ggml_backend_dev_by_name("CPU") == dev, "by name");
    CHECK(ggml_backend_dev_backend_reg(dev) == reg, "the device's backend");

    char model[1024];
    cpu_model_name(model, sizeof model);
    const char * description = ggml_backend_dev_description(dev);
    CHECK(description && strcmp(description, model) == 0, "description '%s', /proc/cpuinfo '%s'", description ? description : "(null)", model);

    size_t total_ram = (size_t) sysconf(_SC_PHYS_PAGES) * (size_t) sysconf(_SC_PAGE_SIZE);
    size_t free_mem = 0, total_mem = 0;
    ggml_backend_dev_memory(dev, &free_mem, &total_mem);
    CHECK(total_mem == total_ram && free_mem == total_mem, "memory %zu free of %zu; sysconf %zu", free_mem, total_mem, total_ram);

    struct ggml_backend_dev_props props;
    memset(&props, 0xa5, sizeof props);
    ggml_backend_dev_get_props(dev, &props);
    CHECK(props.name && strcmp(props.name, "CPU") == 0, "props.name");
    CHECK(props.description == description, "props.description");
    CHECK(props.memory_total == total_ram && props.memory_free == total_ram, "props memory %zu / %zu", props.memory_free, props.memory_total);
    CHECK(props.type == GGML_BACKEND_DEVICE_TYPE_CPU, "props.type %d", (int) props.type);
    CHECK(props.device_id == NULL, "props.device_id");
    CHECK(!props.caps.async && !props.caps.host_buffer && !props.caps.buffer_from_host_ptr && !props.caps.events && props.caps.mmap_support,
          "caps %d %d %d %d %d", props.caps.async, props.caps.host_buffer, props.caps.buffer_from_host_ptr, props.caps.events, props.caps.mmap_support);
}

static void check_threadpool_params(void) {
    struct ggml_threadpool_params p = ggml_threadpool_params_default(4);
    int mask_clear = 1;
    for (int i = 0; i < GGML_MAX_N_THREADS; i++) {
        mask_clear &= !p.cpumask[i];
    }
    CHECK(p.n_threads == 4 && p.prio == GGML_SCHED_PRIO_NORMAL && p.poll == 50 && !p.strict_cpu && !p.paused && mask_clear,
          "defaults: n_threads %d prio %d poll %u strict %d paused %d mask clear %d", p.n_threads, (int) p.prio, p.poll, p.strict_cpu, p.paused, mask_clear);
    struct ggml_threadpool_params q;
    memset(&q, 0xff, sizeof q);
    ggml_threadpool_params_init(&q, 4);
    CHECK(ggml_threadpool_params_match(&p, &q), "init and default differ");
    q.paused = true;
    CHECK(ggml_threadpool_params_match(&p, &q), "paused is not compared");
    q.cpumask[3] = true;
    CHECK(!ggml_threadpool_params_match(&p, &q), "a cpumask difference matches");
}

static int log_calls;

static void my_log(enum ggml_log_level level, const char * text, void * user_data) {
    (void) level;
    (void) text;
    (void) user_data;
    log_calls++;
}

static void check_log(void) {
    ggml_log_callback def = NULL, cb = NULL;
    void * ud = (void *) &cb;
    ggml_log_get(&def, &ud);
    CHECK(def != NULL && ud == NULL, "the default callback is %p with %p", (void *) def, ud);
    int marker = 7;
    ggml_log_set(my_log, &marker);
    ggml_log_get(&cb, &ud);
    CHECK(cb == my_log && ud == &marker, "the callback set is not the one got");
    ggml_log_set(NULL, NULL);
    ggml_log_get(&cb, &ud);
    CHECK(cb == def && ud == NULL, "NULL does not restore the default");
}

static void abort_callback(const char * message) {
    printf("callback: %s\n", message);
    fflush(stdout);
}

int main(int argc, char ** argv) {
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        printf("%s:%d: abort 1 2 3 4 5 6 7 1.5 end\n", __FILE__, __LINE__ + 1);
        GGML_ABORT("abort %d %d %d %d %d %d %d %.1f %s", 1, 2, 3, 4, 5, 6, 7, 1.5, "end");
    }
    if (argc > 1 && strcmp(argv[1], "abort-cb") == 0) {
        if (ggml_set_abort_callback(abort_callback) != NULL || ggml_set_abort_callback(abort_callback) != abort_callback) {
            fprintf(stderr, "FAIL: ggml_set_abort_callback does not return the previous callback\n");
            return 1;
        }
        printf("callback: %s:%d: with callback %s\n", __FILE__, __LINE__ + 1, "x");
        GGML_ABORT("with callback %s", "x");
    }

    llama_backend_init();
    check_time();
    check_types();
    check_cpu_features();
    check_backends();
    check_threadpool_params();
    check_log();
    llama_backend_free();

    if (failures) {
        fprintf(stderr, "ggml_app: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("ggml_app: %d checks passed\n", checks);
    return 0;
}
