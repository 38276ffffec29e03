import Foundation
import XCTest
@testable import PackLM

/// Multi-byte text: accents, a combining mark, CJK, emoji with a skin tone and a ZWJ sequence.
let streamText = "café e\u{0301} 日本語の文 👋🏽 👩\u{200D}💻 done"

final class DetokenizerTests: XCTestCase {
    func stream(_ model: Model, _ ids: [UInt32], _ flags: DetokenizeFlags) throws -> [String] {
        let d = try Detokenizer(model: model, flags: flags)
        var outs = try ids.map { try d.feed($0) }
        outs.append(try d.flush())
        return outs
    }

    func checkStream(_ model: Model, _ text: String) throws {
        let ids = try model.tokenize(text)
        for flags in [DetokenizeFlags(), .skipSpecial] {
            // Each output is decoded with String(decoding:), which turns invalid UTF-8 into
            // U+FFFD: an output that split a character would make the joined text differ.
            let outs = try stream(model, ids, flags)
            XCTAssertEqual(outs.joined(), try model.detokenize(ids, flags: flags))
        }
    }

    func testTiny() throws {
        try checkStream(openTiny(), streamText)
    }

    /// The real SmolLM2 GGUF (byte-level BPE), when models/ has it; PACKLM_REQUIRE_MODELS=1
    /// makes its absence a failure.
    func testSmolLM2() throws {
        let path = tinyDir.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("models/SmolLM2-135M-Instruct.Q4_1.gguf").path
        guard FileManager.default.fileExists(atPath: path) else {
            if ProcessInfo.processInfo.environment["PACKLM_REQUIRE_MODELS"] == "1" {
                XCTFail("PACKLM_REQUIRE_MODELS=1 and \(path) is missing")
            }
            throw XCTSkip("\(path) is missing (scripts/fetch_models.sh fetches it)")
        }
        let model = try Model(path: path)
        let ids = try model.tokenize(streamText, flags: [])
        let outs = try stream(model, ids, [])
        XCTAssertTrue(outs.dropLast().contains(""), "no token was held back: the text does not test partial characters")
        XCTAssertFalse(outs.joined().contains("\u{FFFD}"))
        try checkStream(model, streamText)
    }

    func testBadInput() throws {
        let model = try openTiny()
        assertThrows(.invalidArgument) { _ = try Detokenizer(model: model, flags: DetokenizeFlags(rawValue: 1 << 7)) }
        let d = try Detokenizer(model: model)
        assertThrows(.tokenOutOfRange) { _ = try d.feed(UInt32(model.info.vocabSize)) }
    }
}
