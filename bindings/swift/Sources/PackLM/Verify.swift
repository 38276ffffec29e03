import CPackLM

/// Sampler settings of `sample` and of a sampled verify (packlm_sampler_params). The defaults are
/// greedy with every filter off, as C++'s default_sampler_params().
public struct SamplerParams: Sendable, Equatable {
    /// 0 or below is greedy.
    public var temperature: Float
    /// Keep the k most likely tokens; 0 = off.
    public var topK: UInt32
    /// Keep the smallest set with this much probability; 1 = off.
    public var topP: Float
    /// Drop tokens below minP x the top probability; 0 = off.
    public var minP: Float
    /// HF's rule over `recent`: divide positive logits, multiply negative ones; 1 = off.
    public var repetitionPenalty: Float
    /// The tokens the repetition penalty applies to.
    public var recent: [UInt32]

    public init(temperature: Float = 0, topK: UInt32 = 0, topP: Float = 1, minP: Float = 0,
                repetitionPenalty: Float = 1, recent: [UInt32] = []) {
        self.temperature = temperature
        self.topK = topK
        self.topP = topP
        self.minP = minP
        self.repetitionPenalty = repetitionPenalty
        self.recent = recent
    }
}

/// Draws a token from `logits` under `params`, advancing `rng` (any 64-bit seed; the same seed
/// gives the same draws on any machine). Logits that are NaN or +inf, or all -inf, throw
/// `.invalidArgument`; -inf masks a token out.
public func sample(_ logits: [Float], params: SamplerParams = SamplerParams(), rng: inout UInt64) throws -> UInt32 {
    let sampler = CSampler(params)
    var token: UInt32 = 0
    let status = withExtendedLifetime(sampler) {
        logits.withUnsafeBufferPointer { packlm_sample($0.baseAddress, $0.count, sampler.params, &rng, &token) }
    }
    try check("packlm_sample", status)
    return token
}

/// How a verify judges the drafts (PACKLM_VERIFY_*; ConstantsTests holds the raw values to the
/// header).
public enum VerifyMode: UInt32, Sendable {
    /// A draft is kept while it equals the target's argmax.
    case greedy = 0
    /// The distribution-preserving rejection rule.
    case sampled = 1
}

/// The parameters of `Session.verify` and of a verify item of `Session.stepSessions`
/// (packlm_verify_params); the defaults are a greedy verify.
public struct VerifyParams: Sendable {
    public var mode: VerifyMode
    /// The target's sampler: required in sampled mode (`.nullArgument` without it), ignored in
    /// greedy mode. Its `recent` is ignored: the session's history is used.
    public var sampler: SamplerParams?
    /// Sampled mode: the drafter's probabilities, k rows of vocabSize; nil = each draft is a
    /// point mass (n-gram drafts, greedy draft models). Fewer than k x vocabSize floats throw
    /// `.bufferTooSmall`.
    public var draftProbs: [Float]?
    /// Sampled mode: the random state (any 64-bit seed), advanced in place when a call succeeds.
    /// Required in sampled mode (`.nullArgument` without it).
    public var rngState: UInt64?
    /// Return the vocabSize logits the next token was chosen from (the C result's logits_out).
    public var wantLogits: Bool

    public init(mode: VerifyMode = .greedy, sampler: SamplerParams? = nil, draftProbs: [Float]? = nil,
                rngState: UInt64? = nil, wantLogits: Bool = false) {
        self.mode = mode
        self.sampler = sampler
        self.draftProbs = draftProbs
        self.rngState = rngState
        self.wantLogits = wantLogits
    }
}

/// A verify's outcome (packlm_verify_result).
public struct VerifyResult: Sendable, Equatable {
    /// Drafted tokens accepted, 0...k.
    public let nAccepted: Int
    /// The new pending token: the correction, or the bonus token when all k were accepted.
    public let nextToken: UInt32
    /// The logits `nextToken` was chosen from, with `wantLogits`; else empty.
    public let logits: [Float]
    /// The session's totals over its verifies (the C result's rounds, drafted and accepted).
    public let totalRounds: UInt64
    public let totalDrafted: UInt64
    public let totalAccepted: UInt64
}

extension Session {
    /// The speculative step as one call: `pending` is the token already chosen but not yet fed,
    /// `draft` the k tokens proposed after it. One batched pass over [pending, draft...] accepts
    /// the longest valid prefix; the session then holds nPast + 1 + nAccepted positions, exactly
    /// as if those tokens had been stepped one by one. k + 1 rows past the session's context
    /// throw `.contextOverflow`. A sampled verify advances `params.rngState`; on a throw the
    /// session and `params` are unchanged.
    public func verify(_ pending: UInt32, draft: [UInt32], params: inout VerifyParams) throws -> VerifyResult {
        let call = CVerify(params, vocabSize: model.info.vocabSize)
        let status = withExtendedLifetime(call) {
            draft.withUnsafeBufferPointer { packlm_verify(handle, pending, $0.baseAddress, $0.count, call.params, call.result) }
        }
        try check("packlm_verify", status)
        return call.finish(&params)
    }
}

/// A packlm_sampler_params and its `recent` tokens in memory of their own, which stays put until
/// the object goes (the C struct points to the tokens; Swift's withUnsafe pointers last only as
/// long as their closure).
final class CSampler {
    let params = UnsafeMutablePointer<packlm_sampler_params>.allocate(capacity: 1)
    private let recent: UnsafeMutableBufferPointer<UInt32>

    init(_ p: SamplerParams) {
        recent = .allocate(capacity: p.recent.count)
        _ = recent.initialize(from: p.recent)
        var s = packlm_sampler_params()
        s.size = MemoryLayout<packlm_sampler_params>.size
        s.temperature = p.temperature
        s.top_k = p.topK
        s.top_p = p.topP
        s.min_p = p.minP
        s.repetition_penalty = p.repetitionPenalty
        s.recent = recent.isEmpty ? nil : UnsafePointer(recent.baseAddress)
        s.n_recent = recent.count
        params.initialize(to: s)
    }

    deinit {
        params.deallocate()
        recent.deallocate()
    }
}

/// One verify's packlm_verify_params and packlm_verify_result, with the sampler, random state
/// and buffers they point to, in memory of their own (as CSampler).
final class CVerify {
    let params = UnsafeMutablePointer<packlm_verify_params>.allocate(capacity: 1)
    let result = UnsafeMutablePointer<packlm_verify_result>.allocate(capacity: 1)
    private let sampler: CSampler?
    private let rng: UnsafeMutablePointer<UInt64>?
    private let probs: UnsafeMutableBufferPointer<Float>?
    private let logits: UnsafeMutableBufferPointer<Float>?

    init(_ p: VerifyParams, vocabSize: Int) {
        sampler = p.sampler.map(CSampler.init)
        rng = p.rngState.map { state in
            let r = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
            r.initialize(to: state)
            return r
        }
        // One float more than given, so that an empty array stays a buffer (which the library
        // measures) rather than NULL (point-mass drafts).
        probs = p.draftProbs.map { given in
            let b = UnsafeMutableBufferPointer<Float>.allocate(capacity: given.count + 1)
            b.initialize(repeating: 0)
            for (i, v) in given.enumerated() { b[i] = v }
            return b
        }
        logits = p.wantLogits ? .allocate(capacity: vocabSize) : nil
        logits?.initialize(repeating: 0)
        var v = packlm_verify_params()
        v.size = MemoryLayout<packlm_verify_params>.size
        v.mode = p.mode.rawValue
        v.sampler = sampler.map { UnsafePointer($0.params) }
        v.draft_probs = probs.flatMap { UnsafePointer($0.baseAddress) }
        v.n_draft_probs = p.draftProbs?.count ?? 0
        v.rng_state = rng
        params.initialize(to: v)
        var r = packlm_verify_result()
        r.size = MemoryLayout<packlm_verify_result>.size
        r.logits_out = logits?.baseAddress
        r.logits_capacity = logits?.count ?? 0
        result.initialize(to: r)
    }

    deinit {
        params.deallocate()
        result.deallocate()
        rng?.deallocate()
        probs?.deallocate()
        logits?.deallocate()
    }

    /// The outcome of a call that succeeded; advances `p.rngState`.
    func finish(_ p: inout VerifyParams) -> VerifyResult {
        if let rng = rng { p.rngState = rng.pointee }
        let r = result.pointee
        let written = logits.map { Array($0[0..<r.n_logits]) } ?? []
        return VerifyResult(nAccepted: Int(r.n_accepted), nextToken: r.next_token, logits: written,
                            totalRounds: r.rounds, totalDrafted: r.drafted, totalAccepted: r.accepted)
    }
}
