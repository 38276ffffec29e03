import Foundation
import XCTest
@testable import PackLM

/// The npu backend (PACKLM_BACKEND_NPU) on ONNX Runtime's CPU execution provider, its library
/// named by PACKLM_ONNXRUNTIME (make swift-test sets it from scripts/fetch_onnxruntime.sh).
/// These tests skip only when neither PACKLM_ONNXRUNTIME nor PACKLM_REQUIRE_ONNXRUNTIME is set;
/// with either set, a runtime that cannot be loaded fails them.
final class NpuTests: XCTestCase {
    var tinyLlama: String { tinyDir.appendingPathComponent("llama").path }

    /// PACKLM_ONNXRUNTIME (nil when unset or empty: the system's search path), or a skip
    /// naming why when the runtime is neither named nor required.
    func runtime() throws -> String? {
        let env = ProcessInfo.processInfo.environment
        let library = env["PACKLM_ONNXRUNTIME"].flatMap { $0.isEmpty ? nil : $0 }
        if library == nil && env["PACKLM_REQUIRE_ONNXRUNTIME"] == nil {
            throw XCTSkip("neither PACKLM_ONNXRUNTIME (ONNX Runtime's library) nor PACKLM_REQUIRE_ONNXRUNTIME is set")
        }
        return library
    }

    /// Every row of the golden tokens on npu (the cpu provider) within 1e-4 of the host, and of
    /// HF transformers' golden logits; the model says it runs on npu.
    func testLogitsMatchTheHost() throws {
        let library = try runtime()
        struct Golden: Decodable { let tokens: [UInt32]; let n_vocab: Int; let rows: Int }
        let golden = try JSONDecoder().decode(Golden.self, from: Data(contentsOf: tinyDir.appendingPathComponent("llama/golden.json")))
        let npu = try Model(path: tinyLlama, backend: .npu, provider: "cpu", onnxRuntimeLibrary: library)
        struct Info: Decodable { let backend: String; let device: String? }
        let info = try JSONDecoder().decode(Info.self, from: Data(try npu.infoJSON().utf8))
        XCTAssertEqual(info.backend, "npu")
        XCTAssertTrue(info.device?.contains("cpu execution provider") ?? false, "device: \(info.device ?? "none")")
        let got = try Session(model: npu).stepBatch(golden.tokens, want: .all)
        let host = try Session(model: openTiny()).stepBatch(golden.tokens, want: .all)
        XCTAssertEqual(got.count, golden.rows * golden.n_vocab)
        XCTAssertEqual(got.count, host.count)
        var worst: Float = 0
        for (a, b) in zip(got, host) {
            worst = max(worst, abs(a - b))
        }
        XCTAssertLessThanOrEqual(worst, 1e-4, "max |npu - host| over \(golden.rows) rows")
        let raw = [UInt8](try Data(contentsOf: tinyDir.appendingPathComponent("llama/golden.f32")))
        XCTAssertEqual(raw.count, 4 * got.count)
        var worstHF: Float = 0
        for i in 0..<min(got.count, raw.count / 4) {
            let bits = UInt32(raw[4 * i]) | UInt32(raw[4 * i + 1]) << 8 | UInt32(raw[4 * i + 2]) << 16 | UInt32(raw[4 * i + 3]) << 24
            worstHF = max(worstHF, abs(got[i] - Float(bitPattern: bits)))
        }
        XCTAssertLessThanOrEqual(worstHF, 1e-4, "max |npu - HF|")
    }

    /// A provider the CPU build of ONNX Runtime lacks is refused, naming it.
    func testAbsentProviderIsUnavailable() throws {
        let library = try runtime()
        do {
            _ = try Model(path: tinyLlama, backend: .npu, provider: "qnn", onnxRuntimeLibrary: library)
            XCTFail("the qnn provider was opened")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .backendUnavailable, "\(error)")
            XCTAssertTrue(error.message.contains("\"qnn\""), error.message)
        }
    }

    /// The provider's options and the library's path reach the library: the cpu provider
    /// takes no options, and a library that is not there is named in the refusal.
    func testOptionsReachTheLibrary() throws {
        let library = try runtime()
        do {
            _ = try Model(path: tinyLlama, backend: .npu, provider: "cpu", providerOptions: "threads=2", onnxRuntimeLibrary: library)
            XCTFail("the cpu provider took an option")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .invalidArgument, "\(error)")
            XCTAssertTrue(error.message.contains("threads=2"), error.message)
        }
        let missing = "/nonexistent/libonnxruntime.so"
        do {
            _ = try Model(path: tinyLlama, backend: .npu, onnxRuntimeLibrary: missing)
            XCTFail("a missing ONNX Runtime library was loaded")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .backendUnavailable, "\(error)")
            XCTAssertTrue(error.message.contains(missing), error.message)
        }
    }

    /// `compileAhead` reaches the open: with 100 (the tiny llama's context is 128) it compiles
    /// there the graphs of 14 pass shapes, each wanting no logits, the last row's and every
    /// row's, which an open without it leaves to the passes: `infoJSON()`'s
    /// device_counters.graphs_compiled says how many. The model computes what one opened
    /// without it does, bit for bit.
    func testCompileAheadCompilesAtOpen() throws {
        let library = try runtime()
        func open(_ compileAhead: UInt32) throws -> (Model, Int) {
            let model = try Model(path: tinyLlama, backend: .npu, onnxRuntimeLibrary: library, compileAhead: compileAhead)
            let info = try JSONSerialization.jsonObject(with: Data(try model.infoJSON().utf8)) as? [String: Any]
            let counters = info?["device_counters"] as? [String: Any]
            let compiled = try XCTUnwrap(counters?["graphs_compiled"] as? Int, "info has no device_counters.graphs_compiled")
            return (model, compiled)
        }
        let (plain, none) = try open(0)
        let (ahead, compiled) = try open(100)
        XCTAssertEqual(none, 0, "graphs compiled at an open without compileAhead")
        XCTAssertGreaterThanOrEqual(compiled, 14, "graphs compiled at an open with compileAhead 100")
        let tokens: [UInt32] = [0, 41, 283, 77, 80, 265, 272, 77, 69]
        let want = try Session(model: plain).stepBatch(tokens, want: .all)
        let got = try Session(model: ahead).stepBatch(tokens, want: .all)
        XCTAssertEqual(got.count, tokens.count * 300)
        XCTAssertEqual(got.map(\.bitPattern), want.map(\.bitPattern))
    }

    /// `exportONNXDir` reaches the open: it makes the folder (and its missing parent), and a
    /// stepBatch compiles at least one graph, written there as graph*.onnx beside a non-empty
    /// weights.bin; graphs.json lists every such file, each with inputs and outputs. A folder
    /// under a regular file cannot be made: `.io` naming it.
    func testExportONNXDirWritesTheGraphs() throws {
        let library = try runtime()
        let tmp = FileManager.default.temporaryDirectory.appendingPathComponent("packlm-export-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: tmp) }
        let out = tmp.appendingPathComponent("export/graphs")
        let model = try Model(path: tinyLlama, backend: .npu, onnxRuntimeLibrary: library, exportONNXDir: out.path)
        _ = try Session(model: model).stepBatch([0, 41, 283, 77, 80, 265, 272, 77, 69], want: .all)
        let files = try FileManager.default.contentsOfDirectory(atPath: out.path)
        let onnx = files.filter { $0.hasPrefix("graph") && $0.hasSuffix(".onnx") }.sorted()
        XCTAssertGreaterThanOrEqual(onnx.count, 1, "the folder holds \(files)")
        let weights = try FileManager.default.attributesOfItem(atPath: out.appendingPathComponent("weights.bin").path)
        XCTAssertGreaterThan((weights[.size] as? NSNumber)?.intValue ?? 0, 0, "weights.bin is empty")
        let manifest = try JSONSerialization.jsonObject(with: Data(contentsOf: out.appendingPathComponent("graphs.json"))) as? [String: Any]
        let graphs = try XCTUnwrap(manifest?["graphs"] as? [[String: Any]], "graphs.json has no graphs")
        XCTAssertEqual(graphs.compactMap { $0["file"] as? String }.sorted(), onnx)
        XCTAssertTrue(graphs.allSatisfy { !(($0["inputs"] as? [Any]) ?? []).isEmpty && !(($0["outputs"] as? [Any]) ?? []).isEmpty },
                      "a graph without inputs or outputs")
        let blocker = tmp.appendingPathComponent("a_file")
        XCTAssertTrue(FileManager.default.createFile(atPath: blocker.path, contents: Data("x".utf8)))
        let under = blocker.appendingPathComponent("graphs").path
        do {
            _ = try Model(path: tinyLlama, backend: .npu, onnxRuntimeLibrary: library, exportONNXDir: under)
            XCTFail("exportONNXDir under a regular file gave a model")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .io, "\(error)")
            XCTAssertTrue(error.message.contains(under), error.message)
        }
    }
}

