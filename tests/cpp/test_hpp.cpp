// packlm.hpp under -Wall -Wextra -Werror -std=c++17, included twice in this translation unit
// (the include guard must hold). Usage: test_hpp TINY_PACK_DIR (tests/fixtures/tiny/llama; its
// sibling fixtures embed_qwen3, lora_llama and lora_other_base are found beside it)
#include "packlm.hpp"
#include "packlm.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

static int failed = 0, passed = 0;
#define CHECK(cond)                                                             \
    do {                                                                        \
        if (cond) {                                                             \
            ++passed;                                                           \
        } else {                                                                \
            ++failed;                                                           \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                       \
    } while (0)

// Runs `f`, which must throw packlm::Error with `status`; returns its message.
template <typename F> static std::string expect_error(packlm_status status, F f) {
    try {
        f();
    } catch (const packlm::Error &e) {
        CHECK(e.status() == status);
        if (e.status() != status) std::fprintf(stderr, "  got status %u: %s\n", e.status(), e.what());
        return e.what();
    }
    CHECK(!"no exception");
    return "";
}

static std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        std::fprintf(stderr, "cannot open %s\n", path.c_str());
        std::exit(2);
    }
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A raw little-endian float32 file (golden logits), on a little-endian host.
static std::vector<float> read_f32s(const std::string &path) {
    const std::string bytes = read_file(path);
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
}

// The largest |a[i] - b[i]|; infinite when the lengths differ.
static double max_abs(const std::vector<float> &a, const std::vector<float> &b) {
    double d = a.size() == b.size() ? 0 : INFINITY;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::fmax(d, std::fabs(a[i] - b[i]));
    return d;
}

// The array of numbers, or of arrays of numbers, under "key" of `json` (one row for a flat array).
static std::vector<std::vector<double>> json_numbers(const std::string &json, const std::string &key) {
    size_t at = json.find("\"" + key + "\"");
    if (at == std::string::npos) {
        std::fprintf(stderr, "no key %s\n", key.c_str());
        std::exit(2);
    }
    const char *p = json.c_str() + json.find('[', at) + 1;
    auto skip = [&p] { while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',') ++p; };
    skip();
    const bool nested = *p == '[';
    std::vector<std::vector<double>> rows;
    while (*p != ']') {
        if (nested) ++p;
        rows.emplace_back();
        skip();
        while (*p != ']') {
            char *end = nullptr;
            rows.back().push_back(std::strtod(p, &end));
            if (end == p) {
                std::fprintf(stderr, "%s: not a number at %.20s\n", key.c_str(), p);
                std::exit(2);
            }
            p = end;
            skip();
        }
        if (!nested) break;
        ++p;
        skip();
    }
    return rows;
}

static std::vector<uint32_t> ids_of(const std::vector<double> &row) {
    std::vector<uint32_t> ids;
    for (double v : row) ids.push_back(static_cast<uint32_t>(v));
    return ids;
}

// Embeddings of tiny/embed_qwen3 (the pack's own pooling: last token, normalized) within 1e-4 of
// sentence-transformers, a batch equal to each text alone bit for bit; tiny/lora_llama at scale 1
// within 1e-4 of PEFT; the refusals of each with their status.
static void embeddings_and_adapters(const std::string &tiny, const packlm::Model &llama) {
    const std::string json = read_file(tiny + "/embed_qwen3/embeddings.json");
    std::vector<std::vector<uint32_t>> texts;
    for (const auto &row : json_numbers(json, "tokens")) texts.push_back(ids_of(row));
    const auto want = json_numbers(json, "embeddings");
    packlm::Model em(tiny + "/embed_qwen3");
    const packlm::EmbeddingInfo ei = em.embedding_info();
    CHECK(ei.default_pooling == packlm::Pooling::Last && ei.default_normalize && ei.dim == 64);
    CHECK(em.embedding_info(packlm::Pooling::None).dim == 64);
    packlm::Session es(em);
    const packlm::Embeddings all = es.embed(texts);
    CHECK(all.rows == 5 && all.dim == 64 && want.size() == 5);
    double worst = 0;
    for (size_t i = 0; i < all.rows && i < want.size(); ++i)
        for (size_t j = 0; j < all.dim; ++j) worst = std::fmax(worst, std::fabs(all.row(i)[j] - want[i][j]));
    CHECK(worst <= 1e-4);
    if (worst > 1e-4) std::fprintf(stderr, "  embeddings: max abs %g from sentence-transformers\n", worst);
    for (size_t i = 0; i < texts.size(); ++i) {
        const packlm::Embeddings one = es.embed({texts[i]});
        CHECK(one.rows == 1 && std::memcmp(one.values.data(), all.row(i), all.dim * sizeof(float)) == 0);
    }
    CHECK(es.embed({texts[2]}, packlm::Pooling::None).rows == texts[2].size());
    CHECK(es.embed(texts, packlm::Pooling::Last, true).values == all.values);
    CHECK(expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { es.embed(texts, static_cast<packlm::Pooling>(4)); }).find("params.pooling 4") != std::string::npos);
    expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { es.embed({}); });
    expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { es.embed({{1}, {}}); });
    expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { em.embedding_info(static_cast<packlm::Pooling>(-2)); });
    CHECK(es.n_past() == 0);

    const std::string lora_json = read_file(tiny + "/lora_llama/lora.json");
    const std::vector<uint32_t> tokens = ids_of(json_numbers(lora_json, "tokens").at(0));
    const std::vector<float> golden = read_f32s(tiny + "/lora_llama/logits_scale1.f32");
    for (const std::string &source : {tiny + "/lora_llama", tiny + "/lora_llama/adapter.gguf"}) {
        packlm::Session s(llama);
        {
            const packlm::Adapter a(llama, source);
            CHECK(a.rank() == 4 && a.alpha() == 8.0f);
            s.set_adapters({{&a, 1.0f}});
        } // the session keeps the adapter alive
        const std::vector<float> logits = s.step_batch(tokens, PACKLM_WANT_ALL);
        CHECK(logits.size() == golden.size() && golden.size() == tokens.size() * 300);
        const double d = max_abs(logits, golden);
        CHECK(d <= 1e-4);
        if (d > 1e-4) std::fprintf(stderr, "  %s at scale 1: max abs %g from PEFT\n", source.c_str(), d);
        CHECK(expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { s.set_adapters({}); }).find("positions") != std::string::npos);
    }
    expect_error(PACKLM_ERR_TENSOR, [&] { packlm::Adapter other(llama, tiny + "/lora_other_base"); });
    const packlm::Adapter a(llama, tiny + "/lora_llama");
    packlm::Session fresh(llama);
    expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { fresh.set_adapters({{&a, NAN}}); });
    expect_error(PACKLM_ERR_NULL_ARGUMENT, [&] { fresh.set_adapters({{nullptr, 1.0f}}); });
    fresh.set_adapters({});
}

// tiny/cvec_llama (make_cvec_fixtures.py: transformers with a hook adding v[il] to each decoder
// layer's output): vectors.f32 on layers 0..1 and a.gguf x 0.75 + b.gguf x -0.5 on layer 1, each
// within 1e-4 of the hooked logits and far from no vector's; nullptr clears it (a fresh session's
// bits); the refusals with their status.
static void control_vectors(const std::string &tiny, const packlm::Model &llama) {
    const std::string dir = tiny + "/cvec_llama";
    const std::vector<uint32_t> tokens = ids_of(json_numbers(read_file(dir + "/cvec.json"), "tokens").at(0));
    auto floats = [&](const std::string &name) { return read_f32s(dir + "/" + name); };
    const std::vector<float> plain = packlm::Session(llama).step_batch(tokens, PACKLM_WANT_ALL);
    const packlm::ControlVector from_data(llama, floats("vectors.f32"), 64, 0, 1);
    const packlm::ControlVector from_files(llama, {{dir + "/a.gguf", 0.75f}, {dir + "/b.gguf", -0.5f}}, 1, 1);
    const std::pair<const packlm::ControlVector *, const char *> cases[] = {{&from_data, "logits_data.f32"}, {&from_files, "logits_gguf.f32"}};
    for (const auto &c : cases) {
        const std::vector<float> want = floats(c.second);
        packlm::Session s(llama);
        s.set_control_vector(c.first);
        const std::vector<float> got = s.step_batch(tokens, PACKLM_WANT_ALL);
        const double d = max_abs(got, want);
        CHECK(d <= 1e-4 && max_abs(plain, want) > 0.1);
        if (d > 1e-4) std::fprintf(stderr, "  %s: max abs %g from transformers\n", c.second, d);
        CHECK(expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { s.set_control_vector(nullptr); }).find("positions") != std::string::npos);
        s.truncate(0);
        s.set_control_vector(nullptr);
        CHECK(s.step_batch(tokens, PACKLM_WANT_ALL) == plain);
    }
    CHECK(expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { packlm::ControlVector bad(llama, floats("vectors.f32"), 65, 0, 1); }).find("hidden size") != std::string::npos);
    expect_error(PACKLM_ERR_FORMAT, [&] { packlm::ControlVector bad(llama, {{tiny + "/lora_llama/adapter.gguf", 1.0f}}, 1, 1); });
}

// A mixture of experts: tiny gpt-oss (make_moe_fixtures.py: attention sinks, a biased top-k-first
// router, the clamped SwiGLU) from llama.cpp's GGUF layout and from its HF folder (fused experts),
// every row within 1e-4 of transformers' golden.f32, and the info JSON naming its experts.
static void mixtures(const std::string &tiny) {
    for (const auto &[fixture, pack] : {std::pair<std::string, std::string>{"gpt_oss", "gpt_oss/model.gguf"}, {"gpt_oss", "gpt_oss"}}) {
        const std::vector<uint32_t> tokens = ids_of(json_numbers(read_file(tiny + "/" + fixture + "/golden.json"), "tokens").at(0));
        const std::vector<float> golden = read_f32s(tiny + "/" + fixture + "/golden.f32");
        const packlm::Model m(tiny + "/" + pack);
        packlm::Session s(m);
        const std::vector<float> logits = s.step_batch(tokens, PACKLM_WANT_ALL);
        CHECK(logits.size() == golden.size() && golden.size() == tokens.size() * 300);
        const double d = max_abs(logits, golden);
        CHECK(d <= 1e-4);
        if (d > 1e-4) std::fprintf(stderr, "  %s: max abs %g from transformers\n", pack.c_str(), d);
        const std::string info = m.info_json();
        const size_t at = info.find("\"experts_per_token\"");
        CHECK(at != std::string::npos && info.find_first_not_of(": ", at + 19) == info.find('2', at + 19));
    }
}

// The npu backend on ONNX Runtime's CPU execution provider, its library named by
// PACKLM_ONNXRUNTIME (make cpp-test sets it, and PACKLM_REQUIRE_ONNXRUNTIME, so that a missing
// runtime fails there); skipped, saying why, only when neither is set. The library that cannot
// be loaded needs no runtime and is always checked.
static void npu_backend(const std::string &dir) {
    packlm::NpuOptions no_lib;
    no_lib.onnxruntime_library = dir + "/no-such-dir/libonnxruntime.so.1";
    CHECK(expect_error(PACKLM_ERR_BACKEND_UNAVAILABLE, [&] { packlm::Model m(dir, no_lib); }).find(no_lib.onnxruntime_library) != std::string::npos);

    const char *lib = std::getenv("PACKLM_ONNXRUNTIME");
    if ((lib == nullptr || *lib == '\0') && std::getenv("PACKLM_REQUIRE_ONNXRUNTIME") == nullptr) {
        std::fprintf(stderr, "note: npu part skipped: PACKLM_ONNXRUNTIME (ONNX Runtime's library) and PACKLM_REQUIRE_ONNXRUNTIME are unset\n");
        return;
    }
    // "qnn" is not in the CPU build: unavailable, naming it; the cpu provider takes no options.
    packlm::NpuOptions qnn;
    qnn.provider = "qnn";
    CHECK(expect_error(PACKLM_ERR_BACKEND_UNAVAILABLE, [&] { packlm::Model m(dir, qnn); }).find("\"qnn\"") != std::string::npos);
    packlm::NpuOptions cpu_with_options;
    cpu_with_options.provider_options = "intra_op_num_threads=1";
    CHECK(expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { packlm::Model m(dir, cpu_with_options); }).find("intra_op_num_threads=1") != std::string::npos);

    // The golden tokens stepped on npu (cpu provider) and on host at exact: every row within
    // 1e-4; the info JSON names the backend and the provider.
    const std::vector<uint32_t> tokens = ids_of(json_numbers(read_file(dir + "/golden.json"), "tokens").at(0));
    CHECK(tokens.size() == 20);
    packlm::NpuOptions cpu;
    cpu.provider = "cpu";
    std::optional<packlm::Model> npu;
    try {
        npu.emplace(dir, cpu);
    } catch (const packlm::Error &e) {
        CHECK(!"open on the npu backend");
        std::fprintf(stderr, "  %s\n", e.what());
        return;
    }
    const packlm::Model host(dir, packlm::open_options(packlm::Backend::Host, packlm::Precision::Exact));
    CHECK(npu->precision() == packlm::Precision::Exact);
    const std::string info = npu->info_json();
    CHECK(info.find("\"backend\":\"npu\"") != std::string::npos && info.find("cpu execution provider") != std::string::npos);
    CHECK(host.info_json().find("\"backend\":\"host\"") != std::string::npos);
    packlm::Session ns(*npu), hs(host);
    double worst = 0;
    size_t rows = 0;
    for (uint32_t t : tokens) {
        const std::vector<float> a = ns.step(t), b = hs.step(t);
        rows += a.size() == 300 && b.size() == 300;
        worst = std::fmax(worst, max_abs(a, b));
    }
    CHECK(rows == tokens.size() && worst <= 1e-4);
    std::fprintf(stderr, "note: npu vs host over %zu steps: max |diff| %g\n", rows, worst);

    // compile_ahead 100 (the tiny llama's context is 128): the open compiles the graphs of 14
    // pass shapes (parts of 1 to 64 rows ending at 64 and at 100) and reports each as its second
    // half, so at least 13 fractions fall between 0.5 and 1 (an open without it reports only its
    // layers'); a callback that says stop at the fifth of those (only the compiles report so
    // many) gives PACKLM_ERR_ABORTED. The model computes what the one opened without it does.
    struct Seen {
        int past_half = 0;
        int stop_after = 0;
    };
    packlm_open_options watched = packlm::default_open_options();
    watched.progress = [](float fraction, void *user_data) {
        Seen *seen = static_cast<Seen *>(user_data);
        seen->past_half += fraction > 0.5f && fraction < 1.0f;
        return !(seen->stop_after != 0 && seen->past_half >= seen->stop_after);
    };
    Seen seen;
    watched.user_data = &seen;
    packlm::NpuOptions ahead_npu;
    ahead_npu.compile_ahead = 100;
    const packlm::Model ahead(dir, ahead_npu, watched);
    CHECK(seen.past_half >= 13);
    std::fprintf(stderr, "note: compile_ahead 100: %d progress reports past half\n", seen.past_half);
    CHECK(packlm::Session(ahead).step_batch(tokens, PACKLM_WANT_ALL) == packlm::Session(*npu).step_batch(tokens, PACKLM_WANT_ALL));
    seen = Seen{};
    seen.stop_after = 5;
    expect_error(PACKLM_ERR_ABORTED, [&] { packlm::Model m(dir, ahead_npu, watched); });
    CHECK(seen.past_half == 5);

    // export_onnx_dir: the open makes the folder (and its missing parent); a step_batch compiles
    // at least one graph, written there as graph*.onnx beside a non-empty weights.bin, and
    // graphs.json names every such file. A folder under a regular file cannot be made:
    // PACKLM_ERR_IO naming it.
    std::string tmp_template = (std::filesystem::temp_directory_path() / "packlm_hpp_export.XXXXXX").string();
    const char *made = mkdtemp(tmp_template.data());
    CHECK(made != nullptr);
    if (!made) return;
    const std::filesystem::path tmp = made;
    packlm::NpuOptions export_npu;
    export_npu.export_onnx_dir = (tmp / "export" / "graphs").string();
    {
        const packlm::Model exporting(dir, export_npu);
        packlm::Session(exporting).step_batch(tokens, PACKLM_WANT_ALL);
    }
    const std::string manifest = read_file(export_npu.export_onnx_dir + "/graphs.json");
    int graphs = 0;
    bool all_listed = true;
    for (const auto &entry : std::filesystem::directory_iterator(export_npu.export_onnx_dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("graph", 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".onnx") == 0) {
            ++graphs;
            all_listed = all_listed && manifest.find("\"file\": \"" + name + "\"") != std::string::npos && entry.file_size() > 0;
        }
    }
    CHECK(graphs >= 1 && all_listed);
    CHECK(std::filesystem::file_size(std::filesystem::path(export_npu.export_onnx_dir) / "weights.bin") > 0);
    std::fprintf(stderr, "note: export_onnx_dir: %d graphs written by one step_batch\n", graphs);
    const std::string blocker = (tmp / "a_file").string();
    std::ofstream(blocker).put('x');
    export_npu.export_onnx_dir = blocker + "/graphs";
    CHECK(expect_error(PACKLM_ERR_IO, [&] { packlm::Model m(dir, export_npu); }).find(export_npu.export_onnx_dir) != std::string::npos);
    std::filesystem::remove_all(tmp);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s TINY_PACK_DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    CHECK(packlm::version() == PACKLM_VERSION);

    packlm::Model model(dir);
    const packlm_info info = model.info();
    CHECK(info.n_vocab == 300);
    CHECK(model.n_vocab() == 300);
    CHECK(!model.info_json().empty() && model.info_json().front() == '{');
    CHECK(model.kv_widths().size() == info.n_layers);

    // Precision: exact for this float pack by default, and on the reference backend whatever is
    // asked; an unknown code is refused with its own status.
    CHECK(model.precision() == packlm::Precision::Exact && info.precision == PACKLM_PRECISION_EXACT);
    CHECK(packlm::Model(dir, packlm::Precision::Exact).precision() == packlm::Precision::Exact);
    packlm_open_options ref_fast = packlm::open_options(packlm::Precision::Fast);
    ref_fast.backend = PACKLM_BACKEND_REFERENCE;
    CHECK(packlm::Model(dir, ref_fast).precision() == packlm::Precision::Exact);
    packlm_open_options bad_precision = packlm::default_open_options();
    bad_precision.precision = 7;
    CHECK(expect_error(PACKLM_ERR_UNSUPPORTED_PRECISION, [&] { packlm::Model m(dir, bad_precision); }).find("precision 7") != std::string::npos);

    // HF's ids for "Hello world" with BOS (tests/fixtures/tiny/llama/golden_tokenize.json).
    const std::vector<uint32_t> hello = model.tokenize("Hello world");
    CHECK((hello == std::vector<uint32_t>{0, 41, 283, 77, 80, 265, 272, 77, 69}));
    CHECK(model.detokenize(hello, PACKLM_DETOKENIZE_SKIP_SPECIAL) == "Hello world");
    // A text longer than the first buffer guess goes through the BUFFER_TOO_SMALL retry.
    const std::string long_text(600, 'a');
    CHECK(model.detokenize(model.tokenize(long_text, 0)) == long_text);

    // Streaming: the pieces add up to detokenize, byte for byte.
    const std::string text = "Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!";
    const std::vector<uint32_t> ids = model.tokenize(text, 0);
    packlm::Detokenizer stream(model);
    std::string streamed;
    for (uint32_t id : ids) streamed += stream.feed(id);
    streamed += stream.flush();
    CHECK(streamed == model.detokenize(ids));

    // Sessions: batched == sequential, snapshot/restore == the original, truncate exact.
    packlm::Session a(model), b(model);
    const std::vector<float> batched = a.step_batch(hello);
    std::vector<float> sequential;
    for (uint32_t id : hello) sequential = b.step(id);
    CHECK(batched.size() == 300 && batched == sequential);
    CHECK(a.n_past() == hello.size());
    const std::vector<uint8_t> snap = a.snapshot();
    const std::vector<float> next_a = a.step(5);
    packlm::Session c(model);
    c.restore(snap);
    CHECK(c.n_past() == hello.size());
    CHECK(c.step(5) == next_a);
    c.truncate(hello.size());
    CHECK(c.step(5) == next_a);
    const std::vector<float> all = b.step_batch({7, 8}, PACKLM_WANT_ALL);
    CHECK(all.size() == 600);
    CHECK(b.step_batch({9}, PACKLM_WANT_NONE).empty());

    // Several sessions in one pass: each item's logits are the session's alone; a session named
    // twice throws, naming the item, and changes no session.
    {
        packlm::Session x(model), y(model), rx(model), ry(model);
        x.step_batch(hello);
        rx.step_batch(hello);
        const auto shared = packlm::step_sessions(model, {{&x, {5}, PACKLM_WANT_LAST}, {&y, {7, 8}, PACKLM_WANT_ALL}});
        CHECK(shared.size() == 2 && shared[0] == rx.step(5) && shared[1] == ry.step_batch({7, 8}, PACKLM_WANT_ALL));
        const std::vector<uint8_t> before = x.snapshot();
        const std::string msg = expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] {
            packlm::step_sessions(model, {{&x, {9}, PACKLM_WANT_LAST}, {&x, {9}, PACKLM_WANT_LAST}});
        });
        CHECK(msg.find("item 1") != std::string::npos);
        CHECK(x.snapshot() == before);

        // A fork has its source's state, shares its KV, and steps to a fresh session's bits.
        packlm::Session fx = x.fork();
        CHECK(fx.snapshot() == x.snapshot() && fx.kv_bytes() == x.kv_bytes());
        packlm::Session fresh(model);
        fresh.restore(x.snapshot());
        CHECK(fx.step(11) == fresh.step(11));

        // A constraint: a session holding a copy hands back what the standalone one masks.
        packlm::Constraint rgx(model, PACKLM_GRAMMAR_REGEX, "[a-z]{2,4}");
        packlm::Session cs(model), plain(model);
        std::vector<float> row = plain.step_batch(hello);
        cs.step_batch(hello);
        cs.set_constraint(&rgx);
        for (int i = 0; i < 2; i++) {
            rgx.mask(row);
            const uint32_t t = packlm::argmax(row);
            const std::vector<float> got = cs.step(t);
            rgx.accept(t);
            row = plain.step(t);
            rgx.mask(row);
            CHECK(got == row);
        }
        const std::string bad = expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { packlm::Constraint(model, PACKLM_GRAMMAR_REGEX, "(["); });
        CHECK(bad.find("regex") != std::string::npos);
        // GBNF: the regex's language masks as the regex does.
        packlm::Constraint gb(model, PACKLM_GRAMMAR_GBNF, "root ::= [a-z]{2,4}\n"), rx2(model, PACKLM_GRAMMAR_REGEX, "[a-z]{2,4}");
        std::vector<float> ra = row, rb = row;
        gb.mask(ra);
        rx2.mask(rb);
        CHECK(ra == rb);
        packlm::Constraint js(model, PACKLM_GRAMMAR_JSON_SCHEMA, R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
        CHECK(!js.finished() && !js.can_end() && !js.forced().empty());

        // A greedy verify item beside a step item: the outcome and state of verifying alone.
        packlm::Session v(model), rv(model);
        v.step_batch(hello);
        rv.step_batch(hello);
        packlm_verify_params vp{};
        vp.size = sizeof vp;
        vp.mode = PACKLM_VERIFY_GREEDY;
        packlm_verify_result shared_r{};
        shared_r.size = sizeof shared_r;
        packlm::step_sessions(model, {{&v, {5, 6, 7}, PACKLM_WANT_LAST, &vp, &shared_r}, {&x, {8}, PACKLM_WANT_LAST}});
        packlm_verify_result alone_r{};
        alone_r.size = sizeof alone_r;
        const uint32_t draft[2] = {6, 7};
        CHECK(packlm_verify(rv.get(), 5, draft, 2, &vp, &alone_r) == PACKLM_OK);
        CHECK(shared_r.n_accepted == alone_r.n_accepted && shared_r.next_token == alone_r.next_token);
        CHECK(v.snapshot() == rv.snapshot());
    }

    // Speculative: an n-gram drafter and a greedy verify.
    packlm::Drafter drafter = packlm::Drafter::ngram(3);
    const std::vector<uint32_t> draft = drafter.propose(a, packlm::argmax(next_a), 4);
    CHECK(draft.size() <= 4);
    packlm_verify_params vp{};
    vp.size = sizeof vp;
    vp.mode = PACKLM_VERIFY_GREEDY;
    const size_t before = a.n_past();
    const packlm::VerifyResult r = a.verify(packlm::argmax(next_a), draft, vp, true);
    CHECK(a.n_past() == before + 1 + r.n_accepted);
    CHECK(r.logits.size() == 300 && packlm::argmax(r.logits) == r.next_token);

    packlm_sampler_params sp = packlm::default_sampler_params();
    uint64_t rng = 42;
    CHECK(packlm::sample(next_a, sp, rng) == packlm::argmax(next_a));

    packlm::PrefixCache cache(1 << 24);
    cache.store(b);
    packlm::AbortFlag flag = a.abort_flag();
    flag.set();
    expect_error(PACKLM_ERR_ABORTED, [&] { a.step(5); });
    flag.clear();
    CHECK(a.step(5).size() == 300);

    // Bad input: a status and the library's message, as packlm::Error; the object unchanged.
    std::string msg = expect_error(PACKLM_ERR_IO, [&] { packlm::Model missing(dir + "/no-such-pack"); });
    CHECK(msg.find("no-such-pack") != std::string::npos);
    const size_t held = c.n_past();
    msg = expect_error(PACKLM_ERR_TOKEN_OUT_OF_RANGE, [&] { c.step(300); });
    CHECK(msg.find("300") != std::string::npos);
    std::vector<uint8_t> bad = snap;
    bad[bad.size() / 2] ^= 0x40;
    expect_error(PACKLM_ERR_SNAPSHOT, [&] { c.restore(bad); });
    CHECK(c.n_past() == held);
    expect_error(PACKLM_ERR_INVALID_ARGUMENT, [&] { packlm::Detokenizer odd(model, 8); });

    embeddings_and_adapters(dir + "/..", model);
    mixtures(dir + "/..");
    control_vectors(dir + "/..", model);
    npu_backend(dir);

    // Move-only owners: a moved-from handle frees nothing twice.
    packlm::Session moved = std::move(c);
    CHECK(moved.n_past() == held);

    std::printf("cpp: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
