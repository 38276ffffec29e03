import XCTest
@testable import PackLM

/// Constraint and Session.setConstraint, each mask held to a reference worked out from the
/// tokens' text alone (the same cases as bindings/go/constraint_test.go).
final class ConstraintTests: XCTestCase {
    /// The grammar of the regex tests: exactly `letters` lowercase letters.
    let letters = 6
    var lettersRegex: String { "[a-z]{\(letters)}" }
    let schema = #"{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}"#

    func masked(_ c: Constraint, _ logits: [Float]) throws -> [Float] {
        var out = logits
        try c.mask(&out)
        return out
    }

    func isLetters(_ text: String, _ counts: ClosedRange<Int>) -> Bool {
        counts.contains(text.utf8.count) && text.utf8.allSatisfy { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) }
    }

    /// The tokens that may follow the text `done` under `lettersRegex`, from the tokens' text
    /// alone (not the library's grammar): a token whose text keeps the whole a prefix of a
    /// match, or a stop token once the match is whole.
    func allowed(_ model: Model, after done: String) throws -> Set<UInt32> {
        let stops = Set(try model.stopTokens())
        var out: Set<UInt32> = isLetters(done, letters...letters) ? stops : []
        for id in 0..<UInt32(model.info.vocabSize) where !stops.contains(id) {
            if isLetters(done + (try model.tokenToPiece(id)), 1...letters) { out.insert(id) }
        }
        return out
    }

    /// Each entry of `got` is `raw`'s, bit for bit, where `allowed` holds its token and exactly
    /// -infinity elsewhere; at least one is allowed.
    func assertMask(_ raw: [Float], _ got: [Float], _ allowed: Set<UInt32>,
                    file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(got.count, raw.count, file: file, line: line)
        XCTAssertFalse(allowed.isEmpty, "the reference allows no token", file: file, line: line)
        for i in raw.indices {
            if allowed.contains(UInt32(i)) {
                XCTAssertEqual(got[i].bitPattern, raw[i].bitPattern, "token \(i) is allowed", file: file, line: line)
            } else {
                XCTAssertEqual(got[i], -Float.infinity, "token \(i) is not allowed", file: file, line: line)
            }
        }
    }

    /// A GBNF grammar of the same language, root ::= [a-z]{6}: along greedy decoding each row it
    /// masks allows exactly the tokens the reference allows, and it finishes on the sixth letter.
    func testGBNFMasksItsLanguage() throws {
        let model = try openTiny()
        let c = try Constraint(model: model, kind: .gbnf, text: "root ::= [a-z]{6}\n")
        let s = try Session(model: model)
        var raw = try s.step(0)
        var done = ""
        for _ in 0..<7 {
            let row = try masked(c, raw)
            assertMask(raw, row, try allowed(model, after: done))
            let token = try UInt32(XCTUnwrap(argmax(row)))
            try c.accept(token)
            done += try model.tokenToPiece(token)
            if try c.state().finished { break }
            raw = try s.step(token)
        }
        XCTAssertNotNil(done.range(of: "^[a-z]{6}$", options: .regularExpression), "greedy decoding gave \(done)")
    }

    /// Greedy decoding under [a-z]{6}: each row a standalone constraint masks allows exactly
    /// the tokens the reference allows (kept bit for bit, the rest -infinity), so its argmax is
    /// allowed; a second session holding a copy set after the prompt hands back, for the same
    /// tokens, the bits of the standalone mask of the unconstrained session's row. The grammar
    /// reports finished once six letters are in.
    func testRegexMasksLikeSession() throws {
        let model = try openTiny()
        let c = try Constraint(model: model, kind: .regex, text: lettersRegex)
        let plain = try Session(model: model)
        let held = try Session(model: model)
        var raw = try plain.step(0) // BOS: the prompt, before any constraint
        try held.step(0)
        try held.setConstraint(c)
        var done = ""
        var finished = false
        for step in 0..<7 where !finished {
            let row = try masked(c, raw)
            assertMask(raw, row, try allowed(model, after: done))
            let token = try UInt32(XCTUnwrap(argmax(row)))
            try c.accept(token)
            finished = try c.state().finished
            raw = try plain.step(token)
            let got = try held.step(token)
            XCTAssertTrue(sameBits(got[...], try masked(c, raw)[...]),
                          "step \(step) (token \(token)): the session's row differs from the standalone mask")
            done += try model.tokenToPiece(token)
        }
        XCTAssertTrue(finished, "\(lettersRegex) not finished: \(done)")
        XCTAssertTrue(isLetters(done, letters...letters), "greedy decoding gave \(done)")
        // The last row allows the stop tokens only.
        assertMask(raw, try masked(c, raw), try allowed(model, after: done))
    }

    /// rollback(1) after each accept restores the mask from before it, bit for bit, from the
    /// finished grammar back to its start; rolling back more than was taken throws and changes
    /// nothing.
    func testRollback() throws {
        let model = try openTiny()
        let raw = try Session(model: model).step(0)
        let c = try Constraint(model: model, kind: .regex, text: lettersRegex)
        let start = try masked(c, raw)
        // "ver", "ts", "s": six letters in three tokens; each mask is held to the reference, so
        // the rollbacks are checked against three different masks.
        var before: [[Float]] = []
        var done = ""
        for token: UInt32 in [293, 299, 84] {
            let row = try masked(c, raw)
            assertMask(raw, row, try allowed(model, after: done))
            before.append(row)
            try c.accept(token)
            done += try model.tokenToPiece(token)
        }
        XCTAssertEqual(done, "vertss")
        XCTAssertTrue(try c.state().finished)
        assertMask(raw, try masked(c, raw), try allowed(model, after: done))
        for i in before.indices.reversed() {
            try c.rollback(1)
            XCTAssertTrue(sameBits(try masked(c, raw)[...], before[i][...]), "the mask after rollback(1) differs from before token \(i)")
        }
        XCTAssertTrue(sameBits(before[0][...], start[...]))
        assertThrows(.invalidArgument) { try c.rollback(1) }
        XCTAssertTrue(sameBits(try masked(c, raw)[...], start[...]), "a refused rollback changed the mask")
        assertThrows(.invalidArgument) { try c.rollback(-1) }
    }

    func testRefusals() throws {
        let model = try openTiny()
        let bad: [(GrammarKind, String, Status)] = [
            (.regex, "([", .invalidArgument),
            (.jsonSchema, "{", .invalidArgument),
            (GrammarKind(rawValue: 99), "[a-z]", .invalidArgument),
            // The byte count goes across: a NUL inside is the library's to refuse.
            (.regex, "a\u{0}b", .invalidArgument),
            (.regex, String(repeating: "a", count: Constraint.maxGrammarBytes + 1), .limitExceeded),
        ]
        for (kind, text, status) in bad {
            assertThrows(status) { _ = try Constraint(model: model, kind: kind, text: text) }
        }

        // A token the mask set to -infinity is refused, and the mask after is the mask before.
        let s = try Session(model: model)
        let raw = try s.step(0)
        let c = try Constraint(model: model, kind: .regex, text: lettersRegex)
        let before = try masked(c, raw)
        let banned = 17 // "0": a digit, which lettersRegex never takes
        XCTAssertEqual(before[banned], -Float.infinity)
        assertThrows(.invalidArgument) { try c.accept(UInt32(banned)) }
        XCTAssertTrue(sameBits(try masked(c, raw)[...], before[...]), "the refused token changed the mask")

        // A session holding a constraint refuses restore; cleared, it takes it again.
        let snap = try s.snapshot()
        try s.setConstraint(c)
        assertThrows(.invalidArgument) { try s.restore(snap) }
        try s.setConstraint(nil)
        try s.restore(snap)
    }

    /// The schema of one required integer "a" and nothing else: at the start the grammar can
    /// neither end nor has it ended, and the tokens it forces are the start of `{"a": ` (the
    /// library lays JSON out with ": " after keys).
    func testJSONSchemaForced() throws {
        let model = try openTiny()
        let c = try Constraint(model: model, kind: .jsonSchema, text: schema)
        var state = try c.state()
        XCTAssertFalse(state.finished)
        XCTAssertFalse(state.canEnd)
        let forced = try c.forced()
        let text = try model.detokenize(forced)
        XCTAssertFalse(text.isEmpty, "forced \(forced)")
        XCTAssertTrue(#"{"a": "#.hasPrefix(text), "forced \(forced): \(text)")
        for token in forced { try c.accept(token) }
        state = try c.state()
        XCTAssertFalse(state.finished)
        XCTAssertFalse(state.canEnd)
    }

    /// A literal longer than forced()'s first buffer (16 tokens): the buffer grows to the run.
    func testForcedGrows() throws {
        let model = try openTiny()
        let literal = "abcdefghijklmnopqrstuvwxyz0123456789"
        let forced = try Constraint(model: model, kind: .regex, text: literal).forced()
        let text = try model.detokenize(forced)
        XCTAssertGreaterThan(forced.count, 16)
        XCTAssertTrue(literal.hasPrefix(text), text)
    }
}
