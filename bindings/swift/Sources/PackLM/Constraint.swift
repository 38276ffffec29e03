import CPackLM

/// What a `Constraint`'s text is (PACKLM_GRAMMAR_*, taken from the header). A raw value the
/// library does not know is refused by `Constraint.init` with `.invalidArgument`.
public struct GrammarKind: RawRepresentable, Equatable, Hashable, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// A JSON schema; the output is JSON that validates.
    public static let jsonSchema = GrammarKind(rawValue: UInt32(PACKLM_GRAMMAR_JSON_SCHEMA))
    /// llguidance's Lark-like grammar.
    public static let lark = GrammarKind(rawValue: UInt32(PACKLM_GRAMMAR_LARK))
    /// A regular expression the whole output matches.
    public static let regex = GrammarKind(rawValue: UInt32(PACKLM_GRAMMAR_REGEX))
    /// llama.cpp's GBNF grammar text (rule `root` the start).
    public static let gbnf = GrammarKind(rawValue: UInt32(PACKLM_GRAMMAR_GBNF))
}

/// A grammar over a model's vocabulary and the tokens it has taken (structured output): it masks
/// logits, takes tokens and rolls them back; or, copied into a session with
/// `Session.setConstraint`, masks every logits row that session hands back. It keeps the C model
/// alive itself; freed in deinit. May move to another thread; one thread at a time (every call
/// changes it). A call that throws leaves it as it was.
public final class Constraint {
    let handle: OpaquePointer

    /// The most bytes of grammar text `init` takes (PACKLM_MAX_GRAMMAR_BYTES).
    public static let maxGrammarBytes = Int(PACKLM_MAX_GRAMMAR_BYTES)

    /// A constraint of `kind` over `text` for `model`. Throws `.invalidArgument` for an unknown
    /// kind, text holding a NUL, or a grammar or schema llguidance refuses (its message in the
    /// error); `.limitExceeded` for text over `maxGrammarBytes` UTF-8 bytes.
    public init(model: Model, kind: GrammarKind, text: String) throws {
        // The UTF-8 bytes and their count go across, so a NUL inside reaches the library, which
        // refuses it, rather than cutting the text short.
        let bytes = Array(text.utf8)
        var out: OpaquePointer?
        let status = bytes.withUnsafeBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { packlm_constraint_new(model.handle, kind.rawValue, $0.baseAddress, $0.count, &out) }
        }
        try check("packlm_constraint_new", status)
        guard let constraint = out else {
            throw PackLMError(operation: "packlm_constraint_new", status: .nullArgument, message: "no constraint returned")
        }
        handle = constraint
    }

    deinit { packlm_constraint_free(handle) }

    /// Sets every entry of `logits` whose token may not come next to -infinity (entries past the
    /// vocabulary too); the others are left as they were.
    public func mask(_ logits: inout [Float]) throws {
        let status = logits.withUnsafeMutableBufferPointer { packlm_constraint_mask(handle, $0.baseAddress, $0.count) }
        try check("packlm_constraint_mask", status)
    }

    /// Takes `token`; one the grammar does not allow here throws `.invalidArgument` and changes
    /// nothing. A stop token where the grammar may end finishes it.
    public func accept(_ token: UInt32) throws {
        try check("packlm_constraint_accept", packlm_constraint_accept(handle, token))
    }

    /// Undoes the last `count` tokens taken; more than it has taken throws and changes nothing.
    public func rollback(_ count: Int) throws {
        guard count >= 0 else {
            throw PackLMError(operation: "packlm_constraint_rollback", status: .invalidArgument, message: "a negative token count")
        }
        try check("packlm_constraint_rollback", packlm_constraint_rollback(handle, count))
    }

    /// Whether the constraint has ended (a stop token was taken, or the grammar allows nothing
    /// more) and whether a stop token may come now.
    public func state() throws -> (finished: Bool, canEnd: Bool) {
        var finished: UInt32 = 0
        var canEnd: UInt32 = 0
        try check("packlm_constraint_state", packlm_constraint_state(handle, &finished, &canEnd))
        return (finished != 0, canEnd != 0)
    }

    /// The run of tokens the grammar forces next (empty where it has a choice). Nothing is
    /// taken: accept them to move on.
    public func forced() throws -> [UInt32] {
        var buffer = [UInt32](repeating: 0, count: 16)
        while true {
            var n = 0
            let capacity = buffer.count
            let status = buffer.withUnsafeMutableBufferPointer { packlm_constraint_forced(handle, $0.baseAddress, capacity, &n) }
            do {
                try check("packlm_constraint_forced", status)
            } catch where isBufferTooSmall(error) && n > capacity {
                buffer = [UInt32](repeating: 0, count: n)
                continue
            }
            return Array(buffer[0..<n])
        }
    }
}

extension Session {
    /// Makes the tokens this session takes from now on follow a copy of `constraint` in its
    /// current state (`constraint` stays the caller's: changing or freeing it leaves the copy
    /// alone); nil clears the session's constraint. While one is set, every logits row the
    /// session hands back has -infinity for the tokens the grammar does not allow after that
    /// row's token, a step whose tokens the grammar refuses throws before it runs, `verify`
    /// accepts only drafts the grammar allows, `truncate` rolls the constraint back with the
    /// session and `fork` copies it. `restore` throws while one is set (a snapshot does not hold
    /// it), and so does `stepSessions` (`.unsupported`). A constraint of another model throws.
    public func setConstraint(_ constraint: Constraint?) throws {
        let status = withExtendedLifetime(constraint) {
            packlm_session_set_constraint(handle, constraint?.handle)
        }
        try check("packlm_session_set_constraint", status)
    }
}
