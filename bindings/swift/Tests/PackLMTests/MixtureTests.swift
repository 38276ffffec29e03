import Foundation
import XCTest
@testable import PackLM

/// A mixture of experts: tiny gpt-oss (tests/fixtures/make_moe_fixtures.py: attention sinks, a
/// biased top-k-first router, the clamped SwiGLU), from llama.cpp's GGUF layout and from its HF
/// folder (fused experts), against transformers' golden logits.
final class MixtureTests: XCTestCase {
    struct Golden: Decodable { let tokens: [UInt32]; let rows: Int; let n_vocab: Int; let n_experts: Int }

    /// Every row within 1e-4 of golden.f32; one pass equals stepping bit for bit; the info JSON
    /// states the experts.
    func testGptOssMatchesTransformers() throws {
        for (fixture, pack) in [("gpt_oss", "gpt_oss/model.gguf"), ("gpt_oss", "gpt_oss")] {
            let dir = tinyDir.appendingPathComponent(fixture)
            let g = try JSONDecoder().decode(Golden.self, from: Data(contentsOf: dir.appendingPathComponent("golden.json")))
            let bytes = try Data(contentsOf: dir.appendingPathComponent("golden.f32"))
            let golden: [Float] = bytes.withUnsafeBytes { raw in
                (0..<bytes.count / 4).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 4, as: UInt32.self))) }
            }
            let model = try Model(path: tinyDir.appendingPathComponent(pack).path)
            let logits = try Session(model: model).stepBatch(g.tokens, want: .all)
            XCTAssertEqual(logits.count, g.rows * g.n_vocab)
            XCTAssertEqual(golden.count, logits.count)
            let worst = zip(logits, golden).reduce(Float(0)) { w, p in abs(p.0 - p.1) <= w ? w : abs(p.0 - p.1) }
            XCTAssertLessThanOrEqual(worst, 1e-4, "\(pack): max abs \(worst) from transformers")
            let s = try Session(model: model)
            var stepped: [Float] = []
            for t in g.tokens { stepped += try s.step(t) }
            XCTAssertEqual(stepped, logits, "\(pack): stepping vs one pass")
            let info = try JSONSerialization.jsonObject(with: Data(try model.infoJSON().utf8)) as? [String: Any]
            let experts = info?["experts"] as? [String: Any]
            XCTAssertEqual(experts?["experts"] as? Int, g.n_experts, "\(pack)")
            XCTAssertEqual(experts?["experts_per_token"] as? Int, 2, "\(pack)")
        }
    }
}
