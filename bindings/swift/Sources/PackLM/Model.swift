import CPackLM
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where a model computes (PACKLM_BACKEND_*; the raw values are literals, as Swift enums need:
/// ConstantsTests holds them to include/packlm.h).
public enum Backend: UInt32, Sendable {
    case host = 0
    case reference = 1
    /// The GPU through wgpu (PACKLM_BACKEND_GPU).
    case accelerator = 2
    /// ONNX Runtime on an execution provider (PACKLM_BACKEND_NPU): an NPU, a GPU or the CPU,
    /// chosen by `Model`'s `provider`; ONNX Runtime's library is loaded at run time.
    case npu = 3
    /// The same backend by its newer name.
    public static var gpu: Backend { .accelerator }
}

/// What activations are computed in (PACKLM_PRECISION_*; ConstantsTests holds the raw values to the
/// header).
public enum Precision: UInt32, Sendable {
    /// Open option only: the pack's default, `.fast` for block-quantized weights, `.exact` for
    /// float packs.
    case `default` = 0
    /// Activations f32 end to end (logits within 1e-4 of HF transformers).
    case exact = 1
    /// Activations may be rounded to 8 bits per 32-element block for integer dot products against
    /// block-quantized weights. A backend without such kernels runs exact, and
    /// `ModelInfo.precision` says so.
    case fast = 2
}

/// Tokenize flags (PACKLM_TOKENIZE_*).
public struct TokenizeFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let addSpecial = TokenizeFlags(rawValue: UInt32(PACKLM_TOKENIZE_ADD_SPECIAL))
    public static let parseSpecial = TokenizeFlags(rawValue: UInt32(PACKLM_TOKENIZE_PARSE_SPECIAL))
}

/// Detokenize flags (PACKLM_DETOKENIZE_*).
public struct DetokenizeFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let skipSpecial = DetokenizeFlags(rawValue: UInt32(PACKLM_DETOKENIZE_SKIP_SPECIAL))
}

/// Numbers describing an open model.
public struct ModelInfo: Sendable {
    public let vocabSize: Int
    public let layers: Int
    public let contextLength: Int
    public let hiddenSize: Int
    /// BOS id, or nil when the pack has none.
    public let bos: UInt32?
    /// First EOS id, or nil when the pack has none.
    public let eos: UInt32?
    public let addsBOS: Bool
    public let hasChatTemplate: Bool
    /// The precision in use, `.exact` or `.fast`, after the pack's default and the backend's
    /// kernels (nil for a code this package does not know).
    public let precision: Precision?
}

/// One turn of a conversation.
public struct ChatMessage: Sendable {
    public var role: String
    public var content: String
    public init(role: String, content: String) {
        self.role = role
        self.content = content
    }
}

/// The header's ABI version this package was compiled against, and the loaded library's.
public let abiVersion = UInt32(PACKLM_ABI_VERSION)
public var libraryABIVersion: UInt32 { packlm_abi_version() }
public var libraryVersion: String { String(cString: packlm_version()) }

/// An open model pack (a Hugging Face folder or a GGUF file). Immutable: any number of threads
/// and sessions may use it. Freed when the last reference goes (sessions keep the C model alive
/// themselves).
public final class Model: @unchecked Sendable {
    let handle: OpaquePointer
    public let info: ModelInfo

    /// Opens a pack. `threads` 0 means one worker per core; `precision` `.default` is the pack's.
    /// For `.npu`: `provider` is the execution provider by name (`cpu`, `openvino`, `vitisai`,
    /// `qnn`, `coreml`, `cuda`, `dml`; nil: `cpu`), `providerOptions` its `key=value` pairs
    /// separated by `;` (nil: none), `onnxRuntimeLibrary` the path of ONNX Runtime's shared
    /// library (nil: the environment variable PACKLM_ONNXRUNTIME, then the system's search
    /// path), and `compileAhead` a count of positions: the graphs that sessions of up to that
    /// many positions use are compiled during the open (at most the model's context) rather
    /// than each at its first use (0), and `exportONNXDir` a folder each graph is written into
    /// as it is compiled (graphN_rowsR_kvK.onnx files, their weights in weights.bin beside
    /// them, graphs.json saying what each input and output is; nil: nothing is written), made
    /// by the open when missing; one that cannot be made or written throws `.io` naming it. A
    /// provider the runtime lacks, or a runtime that cannot be loaded, throws
    /// `.backendUnavailable` saying which. The other backends ignore the five.
    public init(path: String, backend: Backend = .host, threads: UInt32 = 0, precision: Precision = .default,
                provider: String? = nil, providerOptions: String? = nil, onnxRuntimeLibrary: String? = nil,
                compileAhead: UInt32 = 0, exportONNXDir: String? = nil) throws {
        var options = packlm_open_options()
        try check("packlm_open_options_init", packlm_open_options_init(&options, MemoryLayout<packlm_open_options>.size))
        options.backend = backend.rawValue
        options.threads = threads
        options.precision = precision.rawValue
        options.compile_ahead = compileAhead
        var out: OpaquePointer?
        // The strings are C copies that live until packlm_model_open returns, which copies
        // what it keeps.
        let status = withOptionalCString(provider) { provider in
            withOptionalCString(providerOptions) { providerOptions in
                withOptionalCString(onnxRuntimeLibrary) { library in
                    withOptionalCString(exportONNXDir) { exportDir in
                        options.provider = provider
                        options.provider_options = providerOptions
                        options.onnxruntime_library = library
                        options.export_onnx_dir = exportDir
                        return packlm_model_open(path, &options, &out)
                    }
                }
            }
        }
        try check("packlm_model_open", status)
        guard let model = out else {
            throw PackLMError(operation: "packlm_model_open", status: .nullArgument, message: "no model returned")
        }
        var raw = packlm_info()
        raw.size = MemoryLayout<packlm_info>.size
        do {
            try check("packlm_model_info", packlm_model_info(model, &raw))
        } catch {
            packlm_model_free(model)
            throw error
        }
        handle = model
        info = ModelInfo(vocabSize: Int(raw.n_vocab), layers: Int(raw.n_layers),
                         contextLength: Int(raw.n_ctx), hiddenSize: Int(raw.hidden_size),
                         bos: raw.bos < 0 ? nil : UInt32(raw.bos), eos: raw.eos < 0 ? nil : UInt32(raw.eos),
                         addsBOS: raw.add_bos != 0, hasChatTemplate: raw.has_chat_template != 0,
                         precision: Precision(rawValue: raw.precision))
    }

    deinit { packlm_model_free(handle) }

    /// Ids that end a reply (EOS and the chat end-of-turn tokens).
    public func stopTokens() throws -> [UInt32] {
        var buffer = [UInt32](repeating: 0, count: 16)
        while true {
            var n = 0
            let capacity = buffer.count
            let status = buffer.withUnsafeMutableBufferPointer { packlm_model_stop_tokens(handle, $0.baseAddress, capacity, &n) }
            do {
                try check("packlm_model_stop_tokens", status)
            } catch where isBufferTooSmall(error) && n > capacity {
                buffer = [UInt32](repeating: 0, count: n)
                continue
            }
            return Array(buffer[0..<n])
        }
    }

    /// Token ids of UTF-8 text.
    public func tokenize(_ text: String, flags: TokenizeFlags = [.addSpecial, .parseSpecial]) throws -> [UInt32] {
        let bytes = Array(text.utf8)
        var buffer = [UInt32](repeating: 0, count: bytes.count + 8)
        while true {
            var n = 0
            let capacity = buffer.count
            let status = bytes.withUnsafeBufferPointer { t in
                t.withMemoryRebound(to: CChar.self) { text in
                    buffer.withUnsafeMutableBufferPointer {
                        packlm_tokenize(handle, text.baseAddress, text.count, flags.rawValue, $0.baseAddress, capacity, &n)
                    }
                }
            }
            do {
                try check("packlm_tokenize", status)
            } catch where isBufferTooSmall(error) && n > capacity {
                buffer = [UInt32](repeating: 0, count: n)
                continue
            }
            return Array(buffer[0..<n])
        }
    }

    /// Text of token ids.
    public func detokenize(_ tokens: [UInt32], flags: DetokenizeFlags = []) throws -> String {
        try tokens.withUnsafeBufferPointer { t in
            try textCall("packlm_detokenize") { packlm_detokenize(handle, t.baseAddress, t.count, flags.rawValue, $0, $1, $2) }
        }
    }

    /// Everything packlm knows about the model as JSON (`packlm_model_info_json`): its layer
    /// table, rope, a mixture's experts, the backend.
    public func infoJSON() throws -> String {
        try textCall("packlm_model_info_json") { packlm_model_info_json(handle, $0, $1, $2) }
    }

    /// Text of one token.
    public func tokenToPiece(_ token: UInt32) throws -> String {
        try textCall("packlm_token_to_piece") { packlm_token_to_piece(handle, token, $0, $1, $2) }
    }

    /// The pack's chat template rendered over `messages`; `addGenerationPrompt` opens the
    /// assistant's turn.
    public func chatApply(_ messages: [ChatMessage], addGenerationPrompt: Bool = true) throws -> String {
        // packlm_chat_message holds pointers: the strings are copied to C memory for the call.
        var strings: [UnsafeMutablePointer<CChar>?] = []
        defer { strings.forEach { free($0) } }
        var array: [packlm_chat_message] = []
        for message in messages {
            let role: UnsafeMutablePointer<CChar>? = strdup(message.role)
            let content: UnsafeMutablePointer<CChar>? = strdup(message.content)
            strings.append(role)
            strings.append(content)
            guard let r = role, let c = content else {
                throw PackLMError(operation: "packlm_chat_apply", status: .outOfMemory, message: "no memory for the messages")
            }
            array.append(packlm_chat_message(role: UnsafePointer(r), content: UnsafePointer(c)))
        }
        return try array.withUnsafeBufferPointer { m in
            try textCall("packlm_chat_apply") {
                packlm_chat_apply(handle, m.baseAddress, m.count, addGenerationPrompt ? 1 : 0, $0, $1, $2)
            }
        }
    }
}

/// Runs `body` with `text` as a NUL-terminated C string (NULL for nil), valid during the call
/// only.
func withOptionalCString<R>(_ text: String?, _ body: (UnsafePointer<CChar>?) throws -> R) rethrows -> R {
    guard let text = text else { return try body(nil) }
    return try text.withCString { try body($0) }
}
