import CPackLM

/// Which logits a batch step returns (PACKLM_WANT_*; ConstantsTests holds the raw values to the
/// header).
public enum Want: UInt32, Sendable {
    case last = 0
    case all = 1
    case none = 2
}

/// One sequence's state: the positions it holds and their KV cache. One thread at a time. A
/// call that throws leaves the session as it was.
public final class Session {
    let handle: OpaquePointer
    public let model: Model

    /// A new, empty session; `contextLength` 0 means the model's.
    public init(model: Model, contextLength: UInt32 = 0) throws {
        var options = packlm_session_options()
        options.size = MemoryLayout<packlm_session_options>.size
        options.n_ctx = contextLength
        var out: OpaquePointer?
        try check("packlm_session_new", packlm_session_new(model.handle, &options, &out))
        guard let session = out else {
            throw PackLMError(operation: "packlm_session_new", status: .nullArgument, message: "no session returned")
        }
        handle = session
        self.model = model
    }

    private init(handle: OpaquePointer, model: Model) {
        self.handle = handle
        self.model = model
    }

    deinit { packlm_session_free(handle) }

    /// A new session with this one's exact state. Their KV is shared copy-on-write: no copy now;
    /// each copies at most one page per layer as it steps on.
    public func fork() throws -> Session {
        var out: OpaquePointer?
        try check("packlm_session_fork", packlm_session_fork(handle, &out))
        guard let session = out else {
            throw PackLMError(operation: "packlm_session_fork", status: .nullArgument, message: "no session returned")
        }
        return Session(handle: session, model: model)
    }

    /// KV bytes alive for this session and every session it shares them with through fork().
    public func kvBytes() throws -> Int {
        var n = 0
        try check("packlm_session_kv_bytes", packlm_session_kv_bytes(handle, &n))
        return n
    }

    /// Positions the session holds.
    public func nPast() throws -> Int {
        var n = 0
        try check("packlm_session_n_past", packlm_session_n_past(handle, &n))
        return n
    }

    /// Feeds one token; returns the logits of its position (vocabSize floats).
    @discardableResult
    public func step(_ token: UInt32) throws -> [Float] {
        var logits = [Float](repeating: 0, count: model.info.vocabSize)
        var n = 0
        let capacity = logits.count
        let status = logits.withUnsafeMutableBufferPointer { packlm_step_into(handle, token, $0.baseAddress, capacity, &n) }
        try check("packlm_step_into", status)
        return logits
    }

    /// Feeds `tokens` in one pass over the weights (bit-identical to stepping them one by one);
    /// returns the last row, every row (row-major), or nothing, as `want` says.
    @discardableResult
    public func stepBatch(_ tokens: [UInt32], want: Want = .last) throws -> [Float] {
        let rows: Int
        switch want {
        case .last: rows = 1
        case .all: rows = tokens.count
        case .none: rows = 0
        }
        var logits = [Float](repeating: 0, count: rows * model.info.vocabSize)
        var n = 0
        let capacity = logits.count
        let status = tokens.withUnsafeBufferPointer { t in
            logits.withUnsafeMutableBufferPointer {
                packlm_step_batch_into(handle, t.baseAddress, t.count, want.rawValue, $0.baseAddress, capacity, &n)
            }
        }
        try check("packlm_step_batch_into", status)
        return Array(logits[0..<n])
    }

    /// The most items one `stepSessions` call takes (PACKLM_MAX_STEP_ITEMS).
    public static let maxStepItems = Int(PACKLM_MAX_STEP_ITEMS)

    /// Feeds each item's tokens (at least one) to its session in one pass over the weights and
    /// returns each item's logits (result `i` for `items[i]`): the same bits `stepBatch` on that
    /// session alone returns. Every session must be of the first item's model and named by one
    /// item only; 1 to `maxStepItems` items are taken. All or nothing: on a throw, whose message
    /// names the item refused ("item 1: ..."), no session has changed.
    public static func stepSessions(_ items: [(session: Session, tokens: [UInt32], want: Want)]) throws -> [[Float]] {
        var stepItems = items.map { StepItem(session: $0.session, tokens: $0.tokens, want: $0.want) }
        return try stepSessions(&stepItems)
    }

    /// Runs each item on its session in one pass over the weights: a step item's logits (result
    /// `i` for `items[i]`) are the bits `stepBatch` on that session alone returns, and a verify
    /// item's `result` (its logits empty here) is what `verify` alone returns, its
    /// `verify.rngState` advanced as there. Every session must be of the first item's model and
    /// named by one item only; 1 to `maxStepItems` items are taken. All or nothing: on a throw,
    /// whose message names the item refused ("item 1: ..."), no session and no item has changed.
    public static func stepSessions(_ items: inout [StepItem]) throws -> [[Float]] {
        guard let model = items.first?.session.model else {
            throw PackLMError(operation: "packlm_step_sessions", status: .invalidArgument, message: "no items given")
        }
        // packlm_step_item holds pointers: each item's tokens, logits and verify structs get
        // memory of their own for the call.
        var tokenBuffers: [UnsafeMutableBufferPointer<UInt32>] = []
        var logitBuffers: [UnsafeMutableBufferPointer<Float>] = []
        defer {
            tokenBuffers.forEach { $0.deallocate() }
            logitBuffers.forEach { $0.deallocate() }
        }
        var verifies: [CVerify?] = []
        var array: [packlm_step_item] = []
        array.reserveCapacity(items.count)
        for item in items {
            var rows = 0 // a verify's logits go to its result
            if item.verify == nil {
                switch item.want {
                case .last: rows = 1
                case .all: rows = item.tokens.count
                case .none: rows = 0
                }
            }
            let tokens = UnsafeMutableBufferPointer<UInt32>.allocate(capacity: item.tokens.count)
            tokenBuffers.append(tokens)
            _ = tokens.initialize(from: item.tokens)
            let logits = UnsafeMutableBufferPointer<Float>.allocate(capacity: rows * item.session.model.info.vocabSize)
            logitBuffers.append(logits)
            logits.initialize(repeating: 0)
            let verify = item.verify.map { CVerify($0, vocabSize: item.session.model.info.vocabSize) }
            verifies.append(verify)
            array.append(packlm_step_item(session: item.session.handle,
                                          tokens: tokens.isEmpty ? nil : UnsafePointer(tokens.baseAddress),
                                          n_tokens: tokens.count, want: item.want.rawValue,
                                          logits_out: logits.isEmpty ? nil : logits.baseAddress,
                                          capacity: logits.count, n_logits: 0,
                                          verify: verify.map { UnsafePointer($0.params) }, result: verify?.result))
        }
        let status = withExtendedLifetime((items, verifies)) {
            array.withUnsafeMutableBufferPointer { packlm_step_sessions(model.handle, $0.baseAddress, $0.count) }
        }
        try check("packlm_step_sessions", status)
        for i in items.indices {
            if let call = verifies[i], var params = items[i].verify {
                items[i].result = call.finish(&params)
                items[i].verify = params
            }
        }
        return zip(array, logitBuffers).map { item, logits in Array(logits[0..<item.n_logits]) }
    }

    /// Keeps exactly the first `positions` positions; step the next token to get logits again.
    public func truncate(to positions: Int) throws {
        guard positions >= 0 else {
            throw PackLMError(operation: "packlm_truncate", status: .invalidArgument, message: "a negative position count")
        }
        try check("packlm_truncate", packlm_truncate(handle, positions))
    }

    /// The session's exact state as bytes that restore into any session of the same model.
    public func snapshot() throws -> [UInt8] {
        var needed = 0
        do {
            try check("packlm_snapshot", packlm_snapshot(handle, nil, 0, &needed))
        } catch where isBufferTooSmall(error) {}
        var bytes = [UInt8](repeating: 0, count: needed)
        let status = bytes.withUnsafeMutableBufferPointer { packlm_snapshot(handle, $0.baseAddress, $0.count, &needed) }
        try check("packlm_snapshot", status)
        return Array(bytes[0..<needed])
    }

    /// Replaces the state with a snapshot; a corrupted one, or one of another model, throws
    /// `.snapshot` and leaves the session as it was. The snapshot's last token was already
    /// stepped: step the next one to get logits.
    public func restore(_ snapshot: [UInt8]) throws {
        let status = snapshot.withUnsafeBufferPointer { packlm_restore(handle, $0.baseAddress, $0.count) }
        try check("packlm_restore", status)
    }
}

/// One session's part of `Session.stepSessions` (packlm_step_item): a step, which feeds `tokens`
/// and returns the logits `want` asks for, or, with `verify` set, a verify of `tokens[0]` (the
/// pending token) and `tokens[1...]` (the draft), whose outcome the call writes to `result`.
public struct StepItem {
    /// A session of the call's model, named by this item only.
    public let session: Session
    /// The tokens to feed it, at least one; for a verify, the pending token and the draft.
    public var tokens: [UInt32]
    /// A step's logits to return, as in `stepBatch`; unread for a verify.
    public var want: Want
    /// When set, the item is a verify with these parameters, as `Session.verify` takes them (a
    /// sampled one's `rngState` advanced when the call succeeds).
    public var verify: VerifyParams?
    /// A verify's outcome, as `Session.verify` returns it; written when the call succeeds.
    public var result: VerifyResult?

    /// A step item.
    public init(session: Session, tokens: [UInt32], want: Want = .last) {
        self.session = session
        self.tokens = tokens
        self.want = want
    }

    /// A verify item: `pending` and its `draft`, judged under `params`.
    public init(session: Session, pending: UInt32, draft: [UInt32], params: VerifyParams) {
        self.init(session: session, tokens: [pending] + draft)
        verify = params
    }
}

/// The index of the largest logit, ties to the lowest index (greedy decoding); nil when empty.
public func argmax(_ logits: [Float]) -> Int? {
    var best: Int?
    for (i, v) in logits.enumerated() where best == nil || v > logits[best!] {
        best = i
    }
    return best
}
