import CPackLM
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A control vector (llama.cpp's cvec) made for one model: a vector of the hidden width per
/// layer, added to the residual stream at the end of each layer of its range. Immutable: any
/// number of threads may use it. `Session.setControlVector` applies it; sessions keep the C
/// vector alive themselves, so it may be released before them.
public final class ControlVector: @unchecked Sendable {
    let handle: OpaquePointer
    /// The model it was made for.
    public let model: Model

    /// From `data` (layers x `nEmbd` floats, layer 0 first), added at the end of layers
    /// `layers` (0-based, inclusive). A width other than the model's hidden size, a length other
    /// than one vector per layer or a range past the layers throws `.invalidArgument`; a value
    /// that is not finite `.nonFinite`.
    public init(model: Model, data: [Float], nEmbd: Int, layers: ClosedRange<UInt32>) throws {
        var out: OpaquePointer?
        let status = data.withUnsafeBufferPointer { d in
            packlm_control_vector_from_data(model.handle, d.baseAddress, d.count, nEmbd, layers.lowerBound, layers.upperBound, &out)
        }
        try check("packlm_control_vector_from_data", status)
        guard let c = out else {
            throw PackLMError(operation: "packlm_control_vector_from_data", status: .nullArgument, message: "no control vector returned")
        }
        handle = c
        self.model = model
    }

    /// The sum of llama.cpp control-vector GGUFs (tensors direction.N for layer N, from 1), each
    /// times its scale, added at the end of layers `layers` (nil: 1 to the last layer, llama.cpp's
    /// default). A file that is not a control vector throws `.format`; a direction of another
    /// width or layer than the model has `.tensor`.
    public init(model: Model, files: [(path: String, scale: Float)], layers: ClosedRange<UInt32>? = nil) throws {
        let range = layers ?? 1...UInt32(max(model.info.layers - 1, 1))
        let paths: [UnsafeMutablePointer<CChar>?] = files.map { strdup($0.path) }
        defer { paths.forEach { free($0) } }
        let scales = files.map { $0.scale }
        var out: OpaquePointer?
        let status = paths.map { UnsafePointer($0) }.withUnsafeBufferPointer { p in
            scales.withUnsafeBufferPointer { s in
                packlm_control_vector_open(model.handle, p.baseAddress, s.baseAddress, p.count, range.lowerBound, range.upperBound, &out)
            }
        }
        try check("packlm_control_vector_open", status)
        guard let c = out else {
            throw PackLMError(operation: "packlm_control_vector_open", status: .nullArgument, message: "no control vector returned")
        }
        handle = c
        self.model = model
    }

    deinit { packlm_control_vector_free(handle) }
}

extension Session {
    /// Adds `control` at the end of each layer of its range in the session's passes from now on;
    /// nil removes the session's vector. The adapters stay. Only on an empty session
    /// (`.invalidArgument` once it holds positions); a vector of another model is refused too.
    /// The session keeps the vector alive.
    public func setControlVector(_ control: ControlVector?) throws {
        let status = withExtendedLifetime(control) {
            packlm_session_set_control_vector(handle, control?.handle)
        }
        try check("packlm_session_set_control_vector", status)
    }
}
