import Foundation
import XCTest
@testable import PackLM

/// Embeddings of tests/fixtures/tiny/embed_qwen3 against sentence-transformers, and the LoRA
/// adapter tests/fixtures/tiny/lora_llama on the tiny Llama against PEFT.
final class EmbedTests: XCTestCase {
    struct EmbedFixture: Decodable {
        let tokens: [[UInt32]]
        let dim: Int
        let embeddings: [[Double]]
        let token_embeddings_text_index: Int
        let token_embeddings: [[Double]]
    }

    func maxAbs(_ got: ArraySlice<Float>, _ want: [Double]) -> Double {
        zip(got, want).reduce(0) { worst, pair in
            let d = abs(Double(pair.0) - pair.1)
            return d <= worst ? worst : d
        }
    }

    /// The pack's own pooling (last token, normalized) within 1e-4 of sentence-transformers; a
    /// batch equals each text alone, bit for bit; per-token vectors within 1e-4 of HF; bad codes
    /// and texts refused with their status.
    func testEmbedMatchesSentenceTransformers() throws {
        let dir = tinyDir.appendingPathComponent("embed_qwen3")
        let fx = try JSONDecoder().decode(EmbedFixture.self, from: Data(contentsOf: dir.appendingPathComponent("embeddings.json")))
        let model = try Model(path: dir.path)
        XCTAssertEqual(try model.embeddingInfo(), EmbeddingInfo(defaultPooling: .last, defaultNormalize: true, dim: 64))
        XCTAssertEqual(try model.embeddingInfo(pooling: .perToken).dim, 64)
        let session = try Session(model: model)
        let all = try session.embed(fx.tokens)
        XCTAssertEqual(all.rows, fx.embeddings.count)
        XCTAssertEqual(all.dim, fx.dim)
        for (i, want) in fx.embeddings.enumerated() {
            let d = maxAbs(all.row(i), want)
            XCTAssertLessThanOrEqual(d, 1e-4, "text \(i): max abs \(d) from sentence-transformers")
            let alone = try session.embed([fx.tokens[i]])
            XCTAssertTrue(sameBits(alone.values[...], all.row(i)), "text \(i) alone differs from its row in the batch")
        }
        XCTAssertTrue(sameBits(try session.embed(fx.tokens, pooling: .last, normalize: true).values[...], all.values[...]))
        let perToken = try session.embed([fx.tokens[fx.token_embeddings_text_index]], pooling: .perToken)
        XCTAssertEqual(perToken.rows, fx.token_embeddings.count)
        for (i, want) in fx.token_embeddings.enumerated() {
            XCTAssertLessThanOrEqual(maxAbs(perToken.row(i), want), 1e-4, "token \(i)")
        }
        assertThrows(.invalidArgument) { _ = try session.embed(fx.tokens, pooling: Pooling(rawValue: 4)) }
        assertThrows(.invalidArgument) { _ = try session.embed([]) }
        assertThrows(.invalidArgument) { _ = try session.embed([[1], []]) }
        assertThrows(.tokenOutOfRange) { _ = try session.embed([[1, 100_000]]) }
        assertThrows(.invalidArgument) { _ = try model.embeddingInfo(pooling: Pooling(rawValue: -2)) }
        XCTAssertEqual(try session.nPast(), 0)
    }

    /// tiny/lora_llama at scale 1, from the PEFT folder and the GGUF alike: every row of
    /// lora.json's tokens within 1e-4 of PEFT's logits_scale1.f32; a session holding positions
    /// refuses new adapters; an adapter for another base throws `.tensor`.
    func testLoRAMatchesPEFT() throws {
        struct Lora: Decodable { let tokens: [UInt32]; let rows: Int; let n_vocab: Int }
        let dir = tinyDir.appendingPathComponent("lora_llama")
        let fx = try JSONDecoder().decode(Lora.self, from: Data(contentsOf: dir.appendingPathComponent("lora.json")))
        let bytes = try Data(contentsOf: dir.appendingPathComponent("logits_scale1.f32"))
        let golden: [Float] = bytes.withUnsafeBytes { raw in
            (0..<bytes.count / 4).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 4, as: UInt32.self))) }
        }
        let model = try openTiny()
        for source in [dir.path, dir.appendingPathComponent("adapter.gguf").path] {
            let session = try Session(model: model)
            do {
                let adapter = try Adapter(model: model, path: source)
                XCTAssertEqual(adapter.rank, 4)
                XCTAssertEqual(adapter.alpha, 8)
                try session.setAdapters([(adapter: adapter, scale: 1)])
            } // the session keeps the adapter alive
            let logits = try session.stepBatch(fx.tokens, want: .all)
            XCTAssertEqual(logits.count, fx.rows * fx.n_vocab)
            XCTAssertEqual(golden.count, logits.count)
            let worst = zip(logits, golden).reduce(Float(0)) { w, p in abs(p.0 - p.1) <= w ? w : abs(p.0 - p.1) }
            XCTAssertLessThanOrEqual(worst, 1e-4, "\(source) at scale 1: max abs \(worst) from PEFT")
            assertThrows(.invalidArgument) { try session.setAdapters([]) }
        }
        assertThrows(.tensor) { _ = try Adapter(model: model, path: tinyDir.appendingPathComponent("lora_other_base").path) }
        let adapter = try Adapter(model: model, path: dir.path)
        let fresh = try Session(model: model)
        assertThrows(.invalidArgument) { try fresh.setAdapters([(adapter: adapter, scale: .nan)]) }
        assertThrows(.invalidArgument) { try Session(model: try openTiny()).setAdapters([(adapter: adapter, scale: 1)]) }
        try fresh.setAdapters([])
    }
}
