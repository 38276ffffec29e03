import CPackLM

/// A LoRA adapter opened for one model: a PEFT folder (adapter_config.json +
/// adapter_model.safetensors) or a llama.cpp adapter GGUF. Immutable: any number of threads may
/// use it. `Session.setAdapters` applies it; sessions keep the C adapter alive themselves, so it
/// may be released before them.
public final class Adapter: @unchecked Sendable {
    let handle: OpaquePointer
    /// The model it was opened for.
    public let model: Model
    /// Its largest rank.
    public let rank: UInt32
    /// Its alpha (PEFT's lora_alpha; a GGUF's adapter.lora.alpha).
    public let alpha: Float

    /// Opens the adapter at `path` for `model`; one for another base throws `.tensor`, naming the
    /// tensor.
    public init(model: Model, path: String) throws {
        var out: OpaquePointer?
        try check("packlm_adapter_open", packlm_adapter_open(model.handle, path, &out))
        guard let adapter = out else {
            throw PackLMError(operation: "packlm_adapter_open", status: .nullArgument, message: "no adapter returned")
        }
        var r: UInt32 = 0
        var a: Float = 0
        do {
            try check("packlm_adapter_info", packlm_adapter_info(adapter, &r, &a))
        } catch {
            packlm_adapter_free(adapter)
            throw error
        }
        handle = adapter
        self.model = model
        rank = r
        alpha = a
    }

    deinit { packlm_adapter_free(handle) }
}

extension Session {
    /// Applies `adapters`, each with its scale (1 as trained), in order, to the session's passes
    /// from now on; none returns it to the base model. Only on an empty session (`.invalidArgument`
    /// once it holds positions); an adapter of another model or a scale that is not finite is
    /// refused too. The session keeps the adapters alive.
    public func setAdapters(_ adapters: [(adapter: Adapter, scale: Float)]) throws {
        let handles: [OpaquePointer?] = adapters.map { $0.adapter.handle }
        let scales = adapters.map { $0.scale }
        let status = withExtendedLifetime(adapters) {
            handles.withUnsafeBufferPointer { h in
                scales.withUnsafeBufferPointer { s in
                    packlm_session_set_adapters(handle, h.baseAddress, s.baseAddress, h.count)
                }
            }
        }
        try check("packlm_session_set_adapters", status)
    }
}
