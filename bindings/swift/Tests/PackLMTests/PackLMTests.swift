import Foundation
import XCTest
@testable import PackLM

/// The tiny random Llama of tests/fixtures, with HF transformers' golden logits and token ids.
let tinyDir = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("tests/fixtures/tiny")

func openTiny() throws -> Model {
    try Model(path: tinyDir.appendingPathComponent("llama").path)
}

func assertThrows(_ status: Status, file: StaticString = #filePath, line: UInt = #line,
                  _ body: () throws -> Void) {
    do {
        try body()
        XCTFail("no error, want \(status)", file: file, line: line)
    } catch let error as PackLMError {
        XCTAssertEqual(error.status, status, "\(error)", file: file, line: line)
        XCTAssertFalse(error.message.isEmpty, "no message of the library", file: file, line: line)
        XCTAssertTrue("\(error)".contains(error.message), file: file, line: line)
    } catch {
        XCTFail("\(error) is not a PackLMError", file: file, line: line)
    }
}

func sameBits(_ a: ArraySlice<Float>, _ b: ArraySlice<Float>) -> Bool {
    a.count == b.count && zip(a, b).allSatisfy { $0.bitPattern == $1.bitPattern }
}

final class PackLMTests: XCTestCase {
    func testVersions() {
        XCTAssertEqual(libraryABIVersion, abiVersion)
        XCTAssertFalse(libraryVersion.isEmpty)
        XCTAssertNotEqual(Status.snapshot.description, Status.ok.description)
    }

    func testInfo() throws {
        // tests/fixtures/tiny/llama/config.json and golden_tokenize.json: vocab 300, BOS 0, EOS 1.
        let info = try openTiny().info
        XCTAssertEqual(info.vocabSize, 300)
        XCTAssertEqual(info.bos, 0)
        XCTAssertEqual(info.eos, 1)
    }

    /// The tiny pack is a float pack: exact by default; the reference backend (no
    /// reduced-precision kernels) runs exact when asked for fast.
    func testPrecision() throws {
        XCTAssertEqual(try openTiny().info.precision, .exact)
        let path = tinyDir.appendingPathComponent("llama").path
        XCTAssertEqual(try Model(path: path, precision: .exact).info.precision, .exact)
        XCTAssertEqual(try Model(path: path, backend: .reference, precision: .fast).info.precision, .exact)
    }

    /// Logits within 1e-4 of HF transformers' float32 forward, all 20 rows in one batch.
    func testGoldenLogits() throws {
        struct Golden: Decodable { let tokens: [UInt32]; let n_vocab: Int; let rows: Int }
        let golden = try JSONDecoder().decode(Golden.self, from: Data(contentsOf: tinyDir.appendingPathComponent("llama/golden.json")))
        let raw = [UInt8](try Data(contentsOf: tinyDir.appendingPathComponent("llama/golden.f32")))
        XCTAssertEqual(raw.count, 4 * golden.rows * golden.n_vocab)
        let logits = try Session(model: openTiny()).stepBatch(golden.tokens, want: .all)
        XCTAssertEqual(logits.count, golden.rows * golden.n_vocab)
        var worst: Float = 0
        for i in 0..<logits.count {
            let bits = UInt32(raw[4 * i]) | UInt32(raw[4 * i + 1]) << 8 | UInt32(raw[4 * i + 2]) << 16 | UInt32(raw[4 * i + 3]) << 24
            worst = max(worst, abs(logits[i] - Float(bitPattern: bits)))
        }
        XCTAssertLessThanOrEqual(worst, 1e-4)
    }

    /// Token ids as HF's tokenizer gives them, and back to the text.
    func testTokenizeMatchesHF() throws {
        struct Case: Decodable { let text: String; let ids_add_special: [UInt32]; let ids_no_special: [UInt32]; let decoded_no_special: String }
        struct Golden: Decodable { let cases: [Case] }
        let golden = try JSONDecoder().decode(Golden.self, from: Data(contentsOf: tinyDir.appendingPathComponent("golden_tokenize.json")))
        XCTAssertFalse(golden.cases.isEmpty)
        let model = try openTiny()
        for c in golden.cases {
            XCTAssertEqual(try model.tokenize(c.text, flags: [.addSpecial, .parseSpecial]), c.ids_add_special, c.text)
            // HF's add_special_tokens=False still parses special-token text (its default).
            XCTAssertEqual(try model.tokenize(c.text, flags: [.parseSpecial]), c.ids_no_special, c.text)
            XCTAssertEqual(try model.detokenize(c.ids_no_special), c.decoded_no_special)
        }
    }

    func testBatchEqualsSequential() throws {
        let model = try openTiny()
        let tokens: [UInt32] = [0, 41, 283, 77, 80, 265, 272]
        let batch = try Session(model: model).stepBatch(tokens, want: .all)
        let session = try Session(model: model)
        let n = model.info.vocabSize
        for (i, token) in tokens.enumerated() {
            let row = try session.step(token)
            XCTAssertTrue(sameBits(row[...], batch[i * n..<(i + 1) * n]), "row \(i)")
        }
    }

    func testSnapshotRestoreAndTruncate() throws {
        let model = try openTiny()
        let a = try Session(model: model)
        try a.stepBatch([0, 41, 283, 77], want: .none)
        let snapshot = try a.snapshot()
        let want = try a.step(5)
        let b = try Session(model: model)
        try b.restore(snapshot)
        XCTAssertEqual(try b.nPast(), 4)
        XCTAssertTrue(sameBits(try b.step(5)[...], want[...]))
        try a.truncate(to: 4)
        XCTAssertTrue(sameBits(try a.step(5)[...], want[...]))
    }

    func testMissingFile() {
        assertThrows(.io) { _ = try Model(path: "/nonexistent/no-such-model.gguf") }
    }

    func testTokenOutOfRange() throws {
        let model = try openTiny()
        let session = try Session(model: model)
        try session.step(0)
        assertThrows(.tokenOutOfRange) { try session.step(UInt32(model.info.vocabSize)) }
        assertThrows(.tokenOutOfRange) { try session.stepBatch([3, 1 << 31]) }
        assertThrows(.tokenOutOfRange) { _ = try model.detokenize([1 << 20]) }
        XCTAssertEqual(try session.nPast(), 1)
    }

    func testCorruptedSnapshot() throws {
        let model = try openTiny()
        let a = try Session(model: model)
        try a.stepBatch([0, 41, 283], want: .none)
        let snapshot = try a.snapshot()
        let b = try Session(model: model)
        try b.step(7)
        var flipped = snapshot
        flipped[flipped.count / 2] ^= 0x40
        assertThrows(.snapshot) { try b.restore(flipped) }
        assertThrows(.snapshot) { try b.restore(Array(snapshot.dropLast())) }
        assertThrows(.snapshot) { try b.restore([]) }
        XCTAssertEqual(try b.nPast(), 1)
    }

    func testNoChatTemplate() throws {
        let model = try openTiny()
        XCTAssertFalse(model.info.hasChatTemplate)
        assertThrows(.unsupported) { _ = try model.chatApply([ChatMessage(role: "user", content: "hi")]) }
    }

    func testArgmax() {
        XCTAssertEqual(argmax([1, 3, 3, -1]), 1)
        XCTAssertNil(argmax([]))
    }
}
