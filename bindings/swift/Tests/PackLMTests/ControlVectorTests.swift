import Foundation
import XCTest
@testable import PackLM

/// The control vectors of tests/fixtures/tiny/cvec_llama (make_cvec_fixtures.py: transformers
/// with a hook adding v[il] to each decoder layer's output) on the tiny Llama.
final class ControlVectorTests: XCTestCase {
    struct Fixture: Decodable { let tokens: [UInt32]; let n_layers: Int; let hidden: Int }

    func floats(_ url: URL) throws -> [Float] {
        let bytes = try Data(contentsOf: url)
        return bytes.withUnsafeBytes { raw in
            (0..<bytes.count / 4).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 4, as: UInt32.self))) }
        }
    }

    func maxAbs(_ a: [Float], _ b: [Float]) -> Float {
        a.count != b.count ? .infinity : zip(a, b).reduce(Float(0)) { w, p in abs(p.0 - p.1) <= w ? w : abs(p.0 - p.1) }
    }

    /// vectors.f32 on layers 0...1 and a.gguf x 0.75 + b.gguf x -0.5 on llama.cpp's default range
    /// (1 to the last layer): every row within 1e-4 of the hooked logits and far from no vector's;
    /// nil clears it (a fresh session's bits); a session holding positions refuses a change; a
    /// wrong width throws `.invalidArgument`, a LoRA GGUF `.format`.
    func testControlVectorMatchesTransformers() throws {
        let dir = tinyDir.appendingPathComponent("cvec_llama")
        let fx = try JSONDecoder().decode(Fixture.self, from: Data(contentsOf: dir.appendingPathComponent("cvec.json")))
        let model = try openTiny()
        let plain = try Session(model: model).stepBatch(fx.tokens, want: .all)
        let vectors = try floats(dir.appendingPathComponent("vectors.f32"))
        let cases: [(() throws -> ControlVector, String)] = [
            ({ try ControlVector(model: model, data: vectors, nEmbd: fx.hidden, layers: 0...UInt32(fx.n_layers - 1)) }, "logits_data.f32"),
            ({ try ControlVector(model: model, files: [(path: dir.appendingPathComponent("a.gguf").path, scale: 0.75), (path: dir.appendingPathComponent("b.gguf").path, scale: -0.5)]) }, "logits_gguf.f32"),
        ]
        for (make, file) in cases {
            let want = try floats(dir.appendingPathComponent(file))
            let session = try Session(model: model)
            do {
                try session.setControlVector(try make())
            } // the session keeps the vector alive
            let got = try session.stepBatch(fx.tokens, want: .all)
            XCTAssertLessThanOrEqual(maxAbs(got, want), 1e-4, "\(file): max abs from transformers")
            XCTAssertGreaterThan(maxAbs(plain, want), 0.1, "\(file): no vector is as close")
            assertThrows(.invalidArgument) { try session.setControlVector(nil) }
            try session.truncate(to: 0)
            try session.setControlVector(nil)
            XCTAssertEqual(try session.stepBatch(fx.tokens, want: .all).map { $0.bitPattern }, plain.map { $0.bitPattern })
        }
        assertThrows(.invalidArgument) { _ = try ControlVector(model: model, data: vectors, nEmbd: fx.hidden + 1, layers: 0...1) }
        assertThrows(.format) { _ = try ControlVector(model: model, files: [(path: tinyDir.appendingPathComponent("lora_llama/adapter.gguf").path, scale: 1)]) }
    }
}
