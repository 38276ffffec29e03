/* packlm.hpp: header-only C++17 owners over the C API of packlm.h.
 *
 * - Every handle (model, session, drafter, detokenizer stream, abort flag) has one owner class:
 *   move-only, freed in its destructor (std::unique_ptr with the matching packlm_*_free).
 * - Errors are exceptions: a failing call throws packlm::Error, which carries the library's
 *   status (status()) and its message (what(): the text of packlm_last_error, copied at once,
 *   prefixed with the status text). Exceptions were chosen over an expected-style return
 *   because C++17 has no std::expected and every call that can fail here is an I/O-, input- or
 *   state-level failure a host wants to unwind from, not a value it branches on.
 * - Text goes in as std::string_view (any bytes, UTF-8 expected); ids, logits and snapshots come
 *   out as std::vector and text as std::string. Buffers are sized through the C API's
 *   PACKLM_ERR_BUFFER_TOO_SMALL answers, never guessed.
 * - Thread rules are the C API's: a Model or an Adapter may be used from any number of threads at
 *   once; a Session, Drafter or Detokenizer from one thread at a time.
 */
#ifndef PACKLM_HPP
#define PACKLM_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "packlm.h"

namespace packlm {

/** A failed packlm call: the status and the library's message. */
class Error : public std::runtime_error {
public:
    Error(packlm_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    /** The PACKLM_ERR_* number. */
    packlm_status status() const noexcept { return status_; }

private:
    packlm_status status_;
};

namespace detail {

/** Throws packlm::Error for a status other than PACKLM_OK. */
inline void check(packlm_status status) {
    if (status != PACKLM_OK) {
        const char *message = packlm_last_error();
        const char *text = packlm_status_str(static_cast<int32_t>(status));
        throw Error(status, std::string(text ? text : "error") + ": " + (message ? message : ""));
    }
}

/** Calls `call(buf, cap, &n)` for NUL-terminated text, growing the buffer once when asked. */
template <typename Call> std::string text_call(Call call) {
    std::string out(256, '\0');
    size_t n = 0;
    packlm_status st = call(&out[0], out.size(), &n);
    if (st == PACKLM_ERR_BUFFER_TOO_SMALL) {
        out.assign(n, '\0');
        st = call(&out[0], out.size(), &n);
    }
    check(st);
    out.resize(n);
    return out;
}

/** Calls `call(buf, cap, &n)` for an array, growing the buffer once when asked. */
template <typename T, typename Call> std::vector<T> items_call(Call call, size_t guess) {
    std::vector<T> out(guess > 0 ? guess : 1);
    size_t n = 0;
    packlm_status st = call(out.data(), out.size(), &n);
    if (st == PACKLM_ERR_BUFFER_TOO_SMALL) {
        out.assign(n, T());
        st = call(out.data(), out.size(), &n);
    }
    check(st);
    out.resize(n);
    return out;
}

struct ModelFree { void operator()(packlm_model *p) const noexcept { packlm_model_free(p); } };
struct SessionFree { void operator()(packlm_session *p) const noexcept { packlm_session_free(p); } };
struct DrafterFree { void operator()(packlm_drafter *p) const noexcept { packlm_drafter_free(p); } };
struct DetokenizerFree { void operator()(packlm_detokenizer *p) const noexcept { packlm_detokenizer_free(p); } };
struct AbortFree { void operator()(packlm_abort *p) const noexcept { packlm_abort_free(p); } };
struct PrefixCacheFree { void operator()(packlm_prefix_cache *p) const noexcept { packlm_prefix_cache_free(p); } };
struct ConstraintFree { void operator()(packlm_constraint *p) const noexcept { packlm_constraint_free(p); } };
struct AdapterFree { void operator()(packlm_adapter *p) const noexcept { packlm_adapter_free(p); } };
struct ControlVectorFree { void operator()(packlm_control_vector *p) const noexcept { packlm_control_vector_free(p); } };

} // namespace detail

/** The library's version text ("MAJOR.MINOR.PATCH"). */
inline std::string version() { return packlm_version(); }

/** One chat message for Model::chat_apply. */
struct ChatMessage {
    std::string role;
    std::string content;
};

/** Open options with every field at its default (`size` set for this header). */
inline packlm_open_options default_open_options() {
    packlm_open_options o{};
    detail::check(packlm_open_options_init(&o, sizeof o));
    return o;
}

/** What activations are computed in: packlm_open_options.precision and packlm_info.precision. */
enum class Precision : uint32_t {
    /** Open option only: the pack's default, Fast for block-quantized weights, Exact for float ones. */
    Default = PACKLM_PRECISION_DEFAULT,
    /** Activations f32 end to end (logits within 1e-4 of HF transformers). */
    Exact = PACKLM_PRECISION_EXACT,
    /** Activations may be rounded to 8 bits per 32-element block for integer dot products against
     *  block-quantized weights. A backend without such kernels runs Exact (Model::precision says). */
    Fast = PACKLM_PRECISION_FAST,
};

/** Default open options with `precision` set. */
inline packlm_open_options open_options(Precision precision) {
    packlm_open_options o = default_open_options();
    o.precision = static_cast<uint32_t>(precision);
    return o;
}

/** Where a model computes: packlm_open_options.backend. */
enum class Backend : uint32_t {
    Host = PACKLM_BACKEND_HOST,
    Reference = PACKLM_BACKEND_REFERENCE,
    /** wgpu (Vulkan, Metal or DX12); PACKLM_ERR_BACKEND_UNAVAILABLE, saying why, without an adapter. */
    Gpu = PACKLM_BACKEND_GPU,
    /** ONNX graphs run by ONNX Runtime on an execution provider (an NPU, a GPU or the CPU), its
     *  library loaded at open; see NpuOptions. PACKLM_ERR_BACKEND_UNAVAILABLE, saying why, where
     *  the library cannot be loaded or lacks the provider. */
    Npu = PACKLM_BACKEND_NPU,
};

/** Default open options with `backend` and `precision` set. */
inline packlm_open_options open_options(Backend backend, Precision precision = Precision::Default) {
    packlm_open_options o = open_options(precision);
    o.backend = static_cast<uint32_t>(backend);
    return o;
}

/** Backend::Npu's options, owned here: packlm_open_options only points at text, and the Model
 *  constructor that takes these points it at the strings for the open, which copies them. An
 *  empty string leaves its field NULL, the default. */
struct NpuOptions {
    /** The execution provider: "cpu" (empty: the default), "openvino", "vitisai", "qnn",
     *  "coreml", "cuda" or "dml"; one ONNX Runtime lacks gives PACKLM_ERR_BACKEND_UNAVAILABLE. */
    std::string provider;
    /** The provider's options as "key=value" pairs separated by ';'; empty: none. */
    std::string provider_options;
    /** ONNX Runtime's shared library (libonnxruntime.so.*); empty: the environment variable
     *  PACKLM_ONNXRUNTIME, then the system's search path. */
    std::string onnxruntime_library;
    /** Compile at open the graphs that sessions of up to this many positions use (at most the
     *  model's context), which the open's progress counts as its second half; 0: each graph is
     *  compiled at its first use. */
    uint32_t compile_ahead = 0;
    /** A folder each graph is written into as it is compiled (graphN_rowsR_kvK.onnx files,
     *  their weights in weights.bin beside them, graphs.json saying what each input and output
     *  is), made by the open when missing; one that cannot be made or written gives
     *  PACKLM_ERR_IO naming it. Empty: nothing is written. */
    std::string export_onnx_dir;
};

namespace detail {

/** `options` on Backend::Npu pointing at `npu`'s strings (valid while `npu` is). */
inline packlm_open_options with_npu(packlm_open_options options, const NpuOptions &npu) {
    auto text = [](const std::string &s) { return s.empty() ? nullptr : s.c_str(); };
    options.backend = PACKLM_BACKEND_NPU;
    options.provider = text(npu.provider);
    options.provider_options = text(npu.provider_options);
    options.onnxruntime_library = text(npu.onnxruntime_library);
    options.compile_ahead = npu.compile_ahead;
    options.export_onnx_dir = text(npu.export_onnx_dir);
    return options;
}

} // namespace detail

/** How Session::embed pools a text's token vectors (PACKLM_POOLING_*: llama.cpp's numbers). */
enum class Pooling : int32_t {
    /** The pack's own (sentence-transformers' modules.json, a GGUF's pooling_type; None when it declares none). */
    Default = PACKLM_POOLING_DEFAULT,
    /** One vector per token of every text. */
    None = PACKLM_POOLING_NONE,
    Mean = PACKLM_POOLING_MEAN,
    Cls = PACKLM_POOLING_CLS,
    Last = PACKLM_POOLING_LAST,
};

/** What Model::embedding_info reports. */
struct EmbeddingInfo {
    Pooling default_pooling = Pooling::None; // the pack's own
    bool default_normalize = false;          // its vectors L2-normalized by default
    size_t dim = 0;                          // the length of one vector under the pooling asked about
};

/** The vectors of Session::embed: `rows` x `dim` floats, row-major (one row per text when pooled,
 *  one per token of every text with Pooling::None). */
struct Embeddings {
    size_t rows = 0;
    size_t dim = 0;
    std::vector<float> values;
    /** Row `i`'s first float (`dim` of them). */
    const float *row(size_t i) const { return values.data() + i * dim; }
};

/** An open model: weights, tokenizer, chat template. Shareable across threads. */
class Model {
public:
    /** Opens an HF folder or a GGUF file; throws packlm::Error naming what was wrong. */
    explicit Model(const std::string &path) : Model(path, default_open_options()) {}
    /** Opens at `precision` (the other options at their defaults). */
    Model(const std::string &path, Precision precision) : Model(path, open_options(precision)) {}
    /** Opens on Backend::Npu with `npu`'s provider, options, library, compile_ahead and
     *  export_onnx_dir; `options` gives the other fields. */
    Model(const std::string &path, const NpuOptions &npu, const packlm_open_options &options = default_open_options())
        : Model(path, detail::with_npu(options, npu)) {}
    Model(const std::string &path, const packlm_open_options &options) {
        packlm_model *m = nullptr;
        detail::check(packlm_model_open(path.c_str(), &options, &m));
        model_.reset(m);
    }

    const packlm_model *get() const noexcept { return model_.get(); }

    packlm_info info() const {
        packlm_info i{};
        i.size = sizeof i;
        detail::check(packlm_model_info(get(), &i));
        return i;
    }
    uint32_t n_vocab() const { return info().n_vocab; }
    /** The precision in use: Exact or Fast, after the pack's default and the backend's kernels. */
    Precision precision() const { return static_cast<Precision>(info().precision); }
    std::string info_json() const {
        return detail::text_call([&](char *b, size_t c, size_t *n) { return packlm_model_info_json(get(), b, c, n); });
    }
    std::vector<uint32_t> stop_tokens() const {
        return detail::items_call<uint32_t>([&](uint32_t *b, size_t c, size_t *n) { return packlm_model_stop_tokens(get(), b, c, n); }, 8);
    }
    bool is_stop(uint32_t token) const {
        for (uint32_t s : stop_tokens())
            if (s == token) return true;
        return false;
    }
    std::vector<uint32_t> kv_widths() const {
        return detail::items_call<uint32_t>([&](uint32_t *b, size_t c, size_t *n) { return packlm_model_kv_widths(get(), b, c, n); }, 64);
    }

    /** Token ids of `text`; `flags`: PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL. */
    std::vector<uint32_t> tokenize(std::string_view text, uint32_t flags = PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL) const {
        return detail::items_call<uint32_t>(
            [&](uint32_t *b, size_t c, size_t *n) { return packlm_tokenize(get(), text.data(), text.size(), flags, b, c, n); },
            text.size() + 2);
    }
    /** Text of `tokens`; `flags`: 0 or PACKLM_DETOKENIZE_SKIP_SPECIAL. */
    std::string detokenize(const std::vector<uint32_t> &tokens, uint32_t flags = 0) const {
        return detail::text_call([&](char *b, size_t c, size_t *n) { return packlm_detokenize(get(), tokens.data(), tokens.size(), flags, b, c, n); });
    }
    std::string token_to_piece(uint32_t token) const {
        return detail::text_call([&](char *b, size_t c, size_t *n) { return packlm_token_to_piece(get(), token, b, c, n); });
    }
    /** The pack's chat template over `messages`. */
    std::string chat_apply(const std::vector<ChatMessage> &messages, bool add_generation_prompt = true) const {
        std::vector<packlm_chat_message> c;
        c.reserve(messages.size());
        for (const ChatMessage &m : messages) c.push_back(packlm_chat_message{m.role.c_str(), m.content.c_str()});
        return detail::text_call([&](char *b, size_t cap, size_t *n) {
            return packlm_chat_apply(get(), c.data(), c.size(), add_generation_prompt ? 1 : 0, b, cap, n);
        });
    }
    /** The pack's own pooling and normalization, and the length of one vector under `pooling`. */
    EmbeddingInfo embedding_info(Pooling pooling = Pooling::Default) const {
        int32_t p = 0;
        bool normalize = false;
        size_t dim = 0;
        detail::check(packlm_embed_info(get(), static_cast<int32_t>(pooling), &p, &normalize, &dim));
        return EmbeddingInfo{static_cast<Pooling>(p), normalize, dim};
    }

private:
    std::unique_ptr<packlm_model, detail::ModelFree> model_;
};

/** A LoRA adapter opened for one model (a PEFT folder or an adapter GGUF); Session::set_adapters
 *  applies it. Sessions keep it alive, so it may be destroyed before them. Shareable across threads. */
class Adapter {
public:
    /** Opens `path` for `model`; an adapter for another base throws Error with PACKLM_ERR_TENSOR. */
    Adapter(const Model &model, const std::string &path) {
        packlm_adapter *a = nullptr;
        detail::check(packlm_adapter_open(model.get(), path.c_str(), &a));
        adapter_.reset(a);
    }
    const packlm_adapter *get() const noexcept { return adapter_.get(); }
    /** Its largest rank. */
    uint32_t rank() const {
        uint32_t r = 0;
        detail::check(packlm_adapter_info(get(), &r, nullptr));
        return r;
    }
    /** Its alpha (PEFT's lora_alpha; a GGUF's adapter.lora.alpha). */
    float alpha() const {
        float a = 0;
        detail::check(packlm_adapter_info(get(), nullptr, &a));
        return a;
    }

private:
    std::unique_ptr<packlm_adapter, detail::AdapterFree> adapter_;
};

/** A control vector (llama.cpp's cvec) made for one model: a vector of the hidden width per layer,
 *  added at the end of each layer of its range; Session::set_control_vector applies it. Sessions
 *  keep it alive, so it may be destroyed before them. Shareable across threads. */
class ControlVector {
public:
    /** From `data` (n_layers x n_embd floats, layer 0 first), added at the end of layers
     *  `layer_start`..`layer_end` (0-based, inclusive); a wrong width, length or range throws Error
     *  with PACKLM_ERR_INVALID_ARGUMENT, a value that is not finite PACKLM_ERR_NON_FINITE. */
    ControlVector(const Model &model, const std::vector<float> &data, size_t n_embd, uint32_t layer_start, uint32_t layer_end) {
        packlm_control_vector *c = nullptr;
        detail::check(packlm_control_vector_from_data(model.get(), data.data(), data.size(), n_embd, layer_start, layer_end, &c));
        control_.reset(c);
    }
    /** The sum of llama.cpp control-vector GGUFs (each a path and its scale), added at the end of
     *  layers `layer_start`..`layer_end` (llama.cpp's default: 1 to the last layer); a file that is
     *  not a control vector throws Error with PACKLM_ERR_FORMAT, one for another model
     *  PACKLM_ERR_TENSOR. */
    ControlVector(const Model &model, const std::vector<std::pair<std::string, float>> &files, uint32_t layer_start, uint32_t layer_end) {
        std::vector<const char *> paths;
        std::vector<float> scales;
        for (const auto &f : files) {
            paths.push_back(f.first.c_str());
            scales.push_back(f.second);
        }
        packlm_control_vector *c = nullptr;
        detail::check(packlm_control_vector_open(model.get(), paths.data(), scales.data(), paths.size(), layer_start, layer_end, &c));
        control_.reset(c);
    }
    const packlm_control_vector *get() const noexcept { return control_.get(); }

private:
    std::unique_ptr<packlm_control_vector, detail::ControlVectorFree> control_;
};

/** A session's abort flag: set() from any thread stops its passes between layers. */
class AbortFlag {
public:
    explicit AbortFlag(packlm_abort *a) : abort_(a) {}
    void set() const { detail::check(packlm_abort_set(abort_.get())); }
    void clear() const { detail::check(packlm_abort_clear(abort_.get())); }

private:
    std::unique_ptr<packlm_abort, detail::AbortFree> abort_;
};

/** The outcome of Session::verify. */
struct VerifyResult {
    uint32_t n_accepted = 0;
    uint32_t next_token = 0;
    std::vector<float> logits; // those next_token was chosen from, when asked for
};

/** A grammar over a model's vocabulary (PACKLM_GRAMMAR_JSON_SCHEMA, _LARK or _REGEX): masks logits,
 *  takes tokens, rolls back; Session::set_constraint makes a session follow a copy of it. */
class Constraint {
public:
    Constraint(const Model &model, uint32_t kind, const std::string &text) {
        packlm_constraint *c = nullptr;
        detail::check(packlm_constraint_new(model.get(), kind, text.data(), text.size(), &c));
        c_.reset(c);
    }
    packlm_constraint *get() const noexcept { return c_.get(); }
    /** Sets the logit of every token that may not come next to -infinity. */
    void mask(std::vector<float> &logits) { detail::check(packlm_constraint_mask(get(), logits.data(), logits.size())); }
    void accept(uint32_t token) { detail::check(packlm_constraint_accept(get(), token)); }
    void rollback(size_t n) { detail::check(packlm_constraint_rollback(get(), n)); }
    /** Whether it has ended (a stop token taken, or nothing more allowed). */
    bool finished() {
        uint32_t f = 0;
        detail::check(packlm_constraint_state(get(), &f, nullptr));
        return f != 0;
    }
    /** Whether a stop token may come now. */
    bool can_end() {
        uint32_t f = 0, e = 0;
        detail::check(packlm_constraint_state(get(), &f, &e));
        return e != 0;
    }
    /** The tokens the grammar forces next (none where it has a choice). */
    std::vector<uint32_t> forced() {
        std::vector<uint32_t> out(64);
        size_t n = 0;
        packlm_status st = packlm_constraint_forced(get(), out.data(), out.size(), &n);
        if (st == PACKLM_ERR_BUFFER_TOO_SMALL) {
            out.resize(n);
            st = packlm_constraint_forced(get(), out.data(), out.size(), &n);
        }
        detail::check(st);
        out.resize(n);
        return out;
    }

private:
    std::unique_ptr<packlm_constraint, detail::ConstraintFree> c_;
};

/** One sequence's state on a model. The model must outlive no session: sessions keep it alive. */
class Session {
public:
    /** `n_ctx` 0 takes the model's context length. */
    explicit Session(const Model &model, uint32_t n_ctx = 0) : n_vocab_(model.n_vocab()) {
        packlm_session_options o{};
        o.size = sizeof o;
        o.n_ctx = n_ctx;
        packlm_session *s = nullptr;
        detail::check(packlm_session_new(model.get(), &o, &s));
        session_.reset(s);
    }

    packlm_session *get() const noexcept { return session_.get(); }
    uint32_t n_vocab() const noexcept { return n_vocab_; }

    size_t n_past() const {
        size_t n = 0;
        detail::check(packlm_session_n_past(get(), &n));
        return n;
    }
    /** A new session with this one's exact state; their KV is shared copy-on-write (no copy now;
     * each copies at most one page per layer as it steps on). */
    Session fork() const {
        packlm_session *s = nullptr;
        detail::check(packlm_session_fork(get(), &s));
        return Session(s, n_vocab_);
    }
    /** The session's tokens from now on follow a copy of `c` (nullptr clears it): every logits row it
     *  hands back is masked, and verify judges drafts under it. */
    void set_constraint(const Constraint *c) { detail::check(packlm_session_set_constraint(get(), c ? c->get() : nullptr)); }
    /** Applies `adapters` (each an adapter and its scale, in order) to the session's passes from now
     *  on; empty: the base model. Only on an empty session (PACKLM_ERR_INVALID_ARGUMENT once it holds
     *  positions). The session keeps the adapters alive. */
    void set_adapters(const std::vector<std::pair<const Adapter *, float>> &adapters) {
        std::vector<const packlm_adapter *> handles;
        std::vector<float> scales;
        for (const auto &a : adapters) {
            handles.push_back(a.first ? a.first->get() : nullptr);
            scales.push_back(a.second);
        }
        detail::check(packlm_session_set_adapters(get(), handles.data(), scales.data(), handles.size()));
    }
    /** Adds `c` at the end of each layer of its range in the session's passes from now on (nullptr:
     *  no vector); the adapters stay. Only on an empty session (PACKLM_ERR_INVALID_ARGUMENT once it
     *  holds positions). The session keeps the vector alive. */
    void set_control_vector(const ControlVector *c) { detail::check(packlm_session_set_control_vector(get(), c ? c->get() : nullptr)); }
    /** The vectors of `texts` (token ids each): pooled as `pooling` says (the pack's own by default)
     *  and normalized as `normalize` says (nullopt: the pack's own). A text's vector has the same bits
     *  whatever texts share the call; the session's adapters apply and its positions are untouched. */
    Embeddings embed(const std::vector<std::vector<uint32_t>> &texts, Pooling pooling = Pooling::Default,
                     std::optional<bool> normalize = std::nullopt) {
        std::vector<uint32_t> tokens;
        std::vector<size_t> lengths;
        for (const std::vector<uint32_t> &t : texts) {
            tokens.insert(tokens.end(), t.begin(), t.end());
            lengths.push_back(t.size());
        }
        packlm_embed_params p{};
        p.size = sizeof p;
        p.pooling = static_cast<int32_t>(pooling);
        p.normalize = normalize ? (*normalize ? 1 : 0) : -1;
        Embeddings e;
        packlm_status st = packlm_embed(get(), tokens.data(), lengths.data(), lengths.size(), &p, nullptr, 0, &e.rows, &e.dim);
        if (st != PACKLM_ERR_BUFFER_TOO_SMALL) detail::check(st);
        e.values.resize(e.rows * e.dim);
        detail::check(packlm_embed(get(), tokens.data(), lengths.data(), lengths.size(), &p, e.values.data(), e.values.size(), &e.rows, &e.dim));
        return e;
    }
    /** KV bytes alive for this session and every session it shares them with through fork(). */
    size_t kv_bytes() const {
        size_t n = 0;
        detail::check(packlm_session_kv_bytes(get(), &n));
        return n;
    }
    /** Feeds one token; returns the logits of its position (n_vocab floats). */
    std::vector<float> step(uint32_t token) {
        std::vector<float> logits(n_vocab_);
        size_t n = 0;
        detail::check(packlm_step_into(get(), token, logits.data(), logits.size(), &n));
        logits.resize(n);
        return logits;
    }
    /** Feeds `tokens` in one pass; returns the last row's logits (PACKLM_WANT_LAST), every row's
     *  (PACKLM_WANT_ALL, row-major) or none (PACKLM_WANT_NONE). */
    std::vector<float> step_batch(const std::vector<uint32_t> &tokens, uint32_t want = PACKLM_WANT_LAST) {
        size_t rows = want == PACKLM_WANT_ALL ? tokens.size() : (want == PACKLM_WANT_LAST ? 1 : 0);
        std::vector<float> logits(rows * n_vocab_);
        size_t n = 0;
        detail::check(packlm_step_batch_into(get(), tokens.data(), tokens.size(), want, logits.empty() ? nullptr : logits.data(), logits.size(), &n));
        logits.resize(n);
        return logits;
    }
    void truncate(size_t n_positions) { detail::check(packlm_truncate(get(), n_positions)); }
    /** The session's exact state as bytes (restorable into any session of the same model). */
    std::vector<uint8_t> snapshot() const {
        size_t need = 0;
        packlm_status st = packlm_snapshot(get(), nullptr, 0, &need);
        if (st != PACKLM_ERR_BUFFER_TOO_SMALL) detail::check(st);
        std::vector<uint8_t> out(need);
        detail::check(packlm_snapshot(get(), out.data(), out.size(), &need));
        out.resize(need);
        return out;
    }
    void restore(const uint8_t *bytes, size_t len) { detail::check(packlm_restore(get(), bytes, len)); }
    void restore(const std::vector<uint8_t> &bytes) { restore(bytes.data(), bytes.size()); }
    /** The speculative step: see packlm_verify. `want_logits` returns the row that chose next_token. */
    VerifyResult verify(uint32_t pending, const std::vector<uint32_t> &draft, const packlm_verify_params &params, bool want_logits = false) {
        packlm_verify_result r{};
        r.size = sizeof r;
        std::vector<float> logits(want_logits ? n_vocab_ : 0);
        r.logits_out = logits.empty() ? nullptr : logits.data();
        r.logits_capacity = logits.size();
        detail::check(packlm_verify(get(), pending, draft.data(), draft.size(), &params, &r));
        logits.resize(r.n_logits);
        return VerifyResult{r.n_accepted, r.next_token, std::move(logits)};
    }
    /** A handle to this session's abort flag (usable from another thread). */
    AbortFlag abort_flag() const {
        packlm_abort *a = nullptr;
        detail::check(packlm_session_abort_handle(get(), &a));
        return AbortFlag(a);
    }

private:
    Session(packlm_session *s, uint32_t n_vocab) : session_(s), n_vocab_(n_vocab) {}
    std::unique_ptr<packlm_session, detail::SessionFree> session_;
    uint32_t n_vocab_;
};

/** One session's part of step_sessions: a step (its tokens and which logits to return), or,
 *  with `verify` and `result` set, a verify of tokens[0] (pending) and tokens[1..] (the draft)
 *  whose outcome the library writes to `*result`, as packlm_verify does. */
struct StepItem {
    Session *session;
    std::vector<uint32_t> tokens;
    uint32_t want = PACKLM_WANT_LAST;
    const packlm_verify_params *verify = nullptr;
    packlm_verify_result *result = nullptr;
};

/** Runs several sessions of `model` in one pass over the weights: each step item gets the
 *  logits Session::step_batch(tokens, want) would give its session alone, bit for bit (a verify
 *  item gets empty logits, its outcome in its result). All or nothing: a bad item throws Error
 *  naming it ("item 1: ...") and no session changes. */
inline std::vector<std::vector<float>> step_sessions(const Model &model, const std::vector<StepItem> &items) {
    std::vector<std::vector<float>> logits(items.size());
    std::vector<packlm_step_item> c(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        const StepItem &it = items[i];
        const uint32_t n_vocab = it.session ? it.session->n_vocab() : 0;
        const size_t rows = it.verify ? 0 : it.want == PACKLM_WANT_ALL ? it.tokens.size() : (it.want == PACKLM_WANT_LAST ? 1 : 0);
        logits[i].resize(rows * n_vocab);
        c[i] = packlm_step_item{it.session ? it.session->get() : nullptr, it.tokens.data(), it.tokens.size(), it.want,
                                logits[i].empty() ? nullptr : logits[i].data(), logits[i].size(), 0, it.verify, it.result};
    }
    detail::check(packlm_step_sessions(model.get(), c.data(), c.size()));
    for (size_t i = 0; i < items.size(); ++i) logits[i].resize(c[i].n_logits);
    return logits;
}

/** Proposes draft tokens for Session::verify. */
class Drafter {
public:
    /** Prompt lookup over the session's own history. */
    static Drafter ngram(uint32_t max_ngram) {
        packlm_drafter *d = nullptr;
        detail::check(packlm_drafter_new_ngram(max_ngram, &d));
        return Drafter(d);
    }
    /** A smaller model with the same tokenizer, run greedily. */
    static Drafter model(const Model &draft, const Model &target) {
        packlm_drafter *d = nullptr;
        detail::check(packlm_drafter_new_model(draft.get(), target.get(), &d));
        return Drafter(d);
    }
    std::vector<uint32_t> propose(const Session &session, uint32_t pending, size_t k) {
        std::vector<uint32_t> out(k);
        size_t n = 0;
        detail::check(packlm_drafter_propose(drafter_.get(), session.get(), pending, k, out.data(), &n));
        out.resize(n);
        return out;
    }

private:
    explicit Drafter(packlm_drafter *d) : drafter_(d) {}
    std::unique_ptr<packlm_drafter, detail::DrafterFree> drafter_;
};

/** Streaming text: feed() returns only complete UTF-8; feed() outputs plus flush() equal
 *  Model::detokenize of the same tokens, byte for byte. */
class Detokenizer {
public:
    explicit Detokenizer(const Model &model, uint32_t flags = 0) {
        packlm_detokenizer *d = nullptr;
        detail::check(packlm_detokenizer_new(model.get(), flags, &d));
        stream_.reset(d);
    }
    std::string feed(uint32_t token) {
        return detail::text_call([&](char *b, size_t c, size_t *n) { return packlm_detokenizer_feed(stream_.get(), token, b, c, n); });
    }
    std::string flush() {
        return detail::text_call([&](char *b, size_t c, size_t *n) { return packlm_detokenizer_flush(stream_.get(), b, c, n); });
    }

private:
    std::unique_ptr<packlm_detokenizer, detail::DetokenizerFree> stream_;
};

/** Keeps session states keyed by their token prefix, up to a byte budget. */
class PrefixCache {
public:
    explicit PrefixCache(size_t capacity_bytes) {
        packlm_prefix_cache *c = nullptr;
        detail::check(packlm_prefix_cache_new(capacity_bytes, &c));
        cache_.reset(c);
    }
    void store(const Session &session) { detail::check(packlm_prefix_cache_store(cache_.get(), session.get())); }
    /** Restores the longest stored prefix of `tokens`; returns how many tokens it holds. */
    size_t restore(Session &session, const std::vector<uint32_t> &tokens) const {
        size_t reused = 0;
        detail::check(packlm_prefix_cache_restore(cache_.get(), session.get(), tokens.data(), tokens.size(), &reused));
        return reused;
    }

private:
    std::unique_ptr<packlm_prefix_cache, detail::PrefixCacheFree> cache_;
};

/** Sampler parameters with their defaults (greedy). */
inline packlm_sampler_params default_sampler_params() {
    packlm_sampler_params p{};
    p.size = sizeof p;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

/** Draws a token from `logits` under `params`, advancing `rng_state`. */
inline uint32_t sample(const std::vector<float> &logits, const packlm_sampler_params &params, uint64_t &rng_state) {
    uint32_t token = 0;
    detail::check(packlm_sample(logits.data(), logits.size(), &params, &rng_state, &token));
    return token;
}

/** The greedy choice: the largest logit, ties to the lowest id. */
inline uint32_t argmax(const std::vector<float> &logits) {
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<uint32_t>(best);
}

} // namespace packlm

#endif // PACKLM_HPP
