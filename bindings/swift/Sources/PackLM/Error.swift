import CPackLM

/// A packlm_status: a number whose meaning never changes (PACKLM_OK, PACKLM_ERR_*).
public struct Status: RawRepresentable, Equatable, Hashable, CustomStringConvertible, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    init(_ value: Int32) { self.rawValue = UInt32(value) }

    public static let ok = Status(PACKLM_OK)
    public static let nullArgument = Status(PACKLM_ERR_NULL_ARGUMENT)
    public static let invalidArgument = Status(PACKLM_ERR_INVALID_ARGUMENT)
    public static let io = Status(PACKLM_ERR_IO)
    public static let format = Status(PACKLM_ERR_FORMAT)
    public static let unsupported = Status(PACKLM_ERR_UNSUPPORTED)
    public static let tensor = Status(PACKLM_ERR_TENSOR)
    public static let tokenOutOfRange = Status(PACKLM_ERR_TOKEN_OUT_OF_RANGE)
    public static let contextOverflow = Status(PACKLM_ERR_CONTEXT_OVERFLOW)
    public static let bufferTooSmall = Status(PACKLM_ERR_BUFFER_TOO_SMALL)
    public static let tokenizer = Status(PACKLM_ERR_TOKENIZER)
    public static let backendUnavailable = Status(PACKLM_ERR_BACKEND_UNAVAILABLE)
    public static let aborted = Status(PACKLM_ERR_ABORTED)
    public static let snapshot = Status(PACKLM_ERR_SNAPSHOT)
    public static let utf8 = Status(PACKLM_ERR_UTF8)
    public static let panic = Status(PACKLM_ERR_PANIC)
    public static let sessionBusy = Status(PACKLM_ERR_SESSION_BUSY)
    public static let limitExceeded = Status(PACKLM_ERR_LIMIT_EXCEEDED)
    public static let sessionPoisoned = Status(PACKLM_ERR_SESSION_POISONED)
    public static let unsupportedPrecision = Status(PACKLM_ERR_UNSUPPORTED_PRECISION)
    public static let outOfMemory = Status(PACKLM_ERR_OUT_OF_MEMORY)
    public static let nonFinite = Status(PACKLM_ERR_NON_FINITE)

    /// The library's fixed text for the status (packlm_status_str).
    public var description: String {
        String(cString: packlm_status_str(Int32(bitPattern: rawValue)))
    }
}

/// A failed library call: its status and the message packlm_last_error gave right after it.
public struct PackLMError: Error, CustomStringConvertible {
    public let operation: String
    public let status: Status
    public let message: String

    public var description: String {
        let head = "\(operation): \(status) (status \(status.rawValue))"
        return message.isEmpty ? head : "\(head): \(message)"
    }
}

/// Runs one call; a status other than OK throws with the thread's last error message (a Swift
/// call runs on one thread from start to end, and the message is read before anything else).
@discardableResult
func check(_ operation: String, _ status: packlm_status) throws -> Status {
    if status == PACKLM_OK { return .ok }
    let message = String(cString: packlm_last_error())
    throw PackLMError(operation: operation, status: Status(rawValue: status), message: message)
}

func isBufferTooSmall(_ error: Error) -> Bool {
    (error as? PackLMError)?.status == .bufferTooSmall
}

/// A call writing NUL-terminated text into a buffer with a capacity; its length (or, with
/// PACKLM_ERR_BUFFER_TOO_SMALL, the capacity needed) goes to the last argument.
func textCall(_ operation: String,
              _ body: (UnsafeMutablePointer<CChar>, Int, UnsafeMutablePointer<Int>) -> packlm_status) throws -> String {
    var capacity = 256
    while true {
        var buffer = [CChar](repeating: 0, count: capacity)
        var n = 0
        let status = buffer.withUnsafeMutableBufferPointer { b in body(b.baseAddress!, capacity, &n) }
        do {
            try check(operation, status)
        } catch where isBufferTooSmall(error) && n > capacity {
            capacity = n
            continue
        }
        let bytes = buffer[0..<n].map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
