import CPackLM

/// How `Session.embed` turns a text's token vectors into its vector (PACKLM_POOLING_*, taken from
/// the header: llama.cpp's numbers). A raw value the library does not know is refused with
/// `.invalidArgument`.
public struct Pooling: RawRepresentable, Equatable, Hashable, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The pack's own: sentence-transformers' modules.json, a GGUF's pooling_type; `.perToken`
    /// when it declares none.
    public static let `default` = Pooling(rawValue: Int32(PACKLM_POOLING_DEFAULT))
    /// One vector per token of every text (PACKLM_POOLING_NONE; not `.none`, which reads as an
    /// absent Optional).
    public static let perToken = Pooling(rawValue: Int32(PACKLM_POOLING_NONE))
    /// The mean of a text's token vectors.
    public static let mean = Pooling(rawValue: Int32(PACKLM_POOLING_MEAN))
    /// A text's first token's vector.
    public static let cls = Pooling(rawValue: Int32(PACKLM_POOLING_CLS))
    /// A text's last token's vector.
    public static let last = Pooling(rawValue: Int32(PACKLM_POOLING_LAST))
}

/// What `Model.embeddingInfo` reports.
public struct EmbeddingInfo: Equatable, Sendable {
    /// The pack's own pooling (`.perToken` when it declares none).
    public let defaultPooling: Pooling
    /// Whether its vectors are L2-normalized by default.
    public let defaultNormalize: Bool
    /// The length of one vector under the pooling asked about.
    public let dim: Int
}

/// The vectors of `Session.embed`: `rows` x `dim` floats, row-major (one row per text when
/// pooled, one per token of every text in order with `.perToken`).
public struct Embeddings: Sendable {
    public let rows: Int
    public let dim: Int
    public let values: [Float]
    /// Row `i`'s `dim` floats.
    public func row(_ i: Int) -> ArraySlice<Float> { values[i * dim..<(i + 1) * dim] }
}

extension Model {
    /// The pack's own pooling and normalization, and the length of one vector under `pooling`
    /// (`.default`: the pack's own). Safe from any thread.
    public func embeddingInfo(pooling: Pooling = .default) throws -> EmbeddingInfo {
        var p: Int32 = 0
        var normalize = false
        var dim = 0
        try check("packlm_embed_info", packlm_embed_info(handle, pooling.rawValue, &p, &normalize, &dim))
        return EmbeddingInfo(defaultPooling: Pooling(rawValue: p), defaultNormalize: normalize, dim: dim)
    }
}

extension Session {
    /// The vectors of `texts` (token ids each, as `Model.tokenize` gives them with
    /// `.addSpecial`), pooled as `pooling` says and L2-normalized as `normalize` says (nil: the
    /// pack's own, its Normalize module for pooled vectors). All texts run in one pass over the
    /// weights; a text's vector has the same bits whatever texts share the call. The session's
    /// adapters apply; its positions are untouched.
    public func embed(_ texts: [[UInt32]], pooling: Pooling = .default, normalize: Bool? = nil) throws -> Embeddings {
        let tokens = texts.flatMap { $0 }
        let lengths = texts.map { $0.count }
        var params = packlm_embed_params()
        params.size = MemoryLayout<packlm_embed_params>.size
        params.pooling = pooling.rawValue
        params.normalize = normalize.map { $0 ? 1 : 0 } ?? -1
        var rows = 0
        var dim = 0
        let query = tokens.withUnsafeBufferPointer { t in
            lengths.withUnsafeBufferPointer { l in
                packlm_embed(handle, t.baseAddress, l.baseAddress, l.count, &params, nil, 0, &rows, &dim)
            }
        }
        do {
            try check("packlm_embed", query)
        } catch where isBufferTooSmall(error) {}
        var values = [Float](repeating: 0, count: rows * dim)
        let capacity = values.count
        let status = tokens.withUnsafeBufferPointer { t in
            lengths.withUnsafeBufferPointer { l in
                values.withUnsafeMutableBufferPointer {
                    packlm_embed(handle, t.baseAddress, l.baseAddress, l.count, &params, $0.baseAddress, capacity, &rows, &dim)
                }
            }
        }
        try check("packlm_embed", status)
        return Embeddings(rows: rows, dim: dim, values: values)
    }
}
