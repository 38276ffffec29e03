import CPackLM

/// Turns a stream of token ids into text as it grows: each `feed` returns only complete UTF-8
/// (a character split across tokens is held back until it is whole), and everything `feed` and
/// `flush` return, concatenated, equals `Model.detokenize` of the same tokens. One thread at a
/// time; freed in deinit (it keeps the C model alive itself).
public final class Detokenizer {
    let handle: OpaquePointer

    public init(model: Model, flags: DetokenizeFlags = []) throws {
        var out: OpaquePointer?
        try check("packlm_detokenizer_new", packlm_detokenizer_new(model.handle, flags.rawValue, &out))
        guard let stream = out else {
            throw PackLMError(operation: "packlm_detokenizer_new", status: .nullArgument, message: "no stream returned")
        }
        handle = stream
    }

    deinit { packlm_detokenizer_free(handle) }

    /// Adds one token; returns the text it completes (possibly ""). A refused token is not
    /// consumed.
    public func feed(_ token: UInt32) throws -> String {
        try textCall("packlm_detokenizer_feed") { packlm_detokenizer_feed(handle, token, $0, $1, $2) }
    }

    /// Ends the stream: returns what was held back; the next feed starts a new text.
    public func flush() throws -> String {
        try textCall("packlm_detokenizer_flush") { packlm_detokenizer_flush(handle, $0, $1, $2) }
    }
}
