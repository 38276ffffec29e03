import XCTest
@testable import PackLM

/// Verify, verify items of stepSessions and sample, each against an independent path (the same
/// cases as bindings/go/verify_test.go).
final class VerifyTests: XCTestCase {
    /// The tiny model's greedy continuation of this prompt varies: 64 15 296 152 114 152 ...
    let prompt: [UInt32] = [0, 272, 9, 11]

    /// A new session that has been fed `prompt`.
    func promptedSession(_ model: Model) throws -> Session {
        let s = try Session(model: model)
        try s.stepBatch(prompt, want: .none)
        return s
    }

    /// The independent reference for a greedy verify: a fresh session fed `prompt` and then
    /// stepped one token at a time, each the argmax of the step before. Gives n + 1 tokens
    /// (tokens[0] the argmax after the prompt) and the logits each was chosen from.
    func greedyChain(_ model: Model, _ n: Int) throws -> (tokens: [UInt32], rows: [[Float]]) {
        let s = try Session(model: model)
        var row = try s.stepBatch(prompt, want: .last)
        var tokens: [UInt32] = [], rows: [[Float]] = []
        while tokens.count <= n {
            tokens.append(try UInt32(XCTUnwrap(argmax(row))))
            rows.append(row)
            if tokens.count <= n { row = try s.step(tokens.last!) }
        }
        return (tokens, rows)
    }

    /// The snapshot of a fresh session fed `prompt` and then `tokens` one by one.
    func steppedSnapshot(_ model: Model, _ tokens: ArraySlice<UInt32>) throws -> [UInt8] {
        let s = try promptedSession(model)
        for t in tokens { try s.step(t) }
        return try s.snapshot()
    }

    func assertSameResult(_ a: VerifyResult, _ b: VerifyResult, _ what: String,
                          file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(a.nAccepted, b.nAccepted, what, file: file, line: line)
        XCTAssertEqual(a.nextToken, b.nextToken, what, file: file, line: line)
        XCTAssertTrue(sameBits(a.logits[...], b.logits[...]), "\(what): logits differ", file: file, line: line)
        XCTAssertEqual([a.totalRounds, a.totalDrafted, a.totalAccepted], [b.totalRounds, b.totalDrafted, b.totalAccepted],
                       what, file: file, line: line)
    }

    /// Greedy verify against stepping the same tokens one by one and taking the argmax: a draft
    /// that is the greedy continuation is taken whole (the bonus token next), one that departs at
    /// its third token keeps two and corrects the third, an empty one just steps the pending
    /// token. The logits are the stepped row's bits and the session the stepped session's bytes.
    func testVerifyGreedyMatchesStepping() throws {
        let model = try openTiny()
        let (chain, rows) = try greedyChain(model, 8)
        let wrong = (chain[3] + 1) % UInt32(model.info.vocabSize)
        let cases: [(name: String, draft: [UInt32], nAccepted: Int)] = [
            ("whole", Array(chain[1..<5]), 4),
            ("departs at 3", [chain[1], chain[2], wrong, chain[4]], 2),
            ("empty", [], 0),
        ]
        for c in cases {
            let s = try promptedSession(model)
            let before = try s.nPast()
            var params = VerifyParams(wantLogits: true)
            let got = try s.verify(chain[0], draft: c.draft, params: &params)
            let n = c.nAccepted
            XCTAssertEqual(got.nAccepted, n, c.name)
            XCTAssertEqual(got.nextToken, chain[n + 1], c.name)
            XCTAssertTrue(sameBits(got.logits[...], rows[n + 1][...]), "\(c.name): logits differ from the stepped row")
            XCTAssertEqual([got.totalRounds, got.totalDrafted, got.totalAccepted], [1, UInt64(c.draft.count), UInt64(n)], c.name)
            XCTAssertEqual(try s.nPast(), before + 1 + n, c.name)
            XCTAssertEqual(try s.snapshot(), try steppedSnapshot(model, chain[0...n]), c.name)
            guard c.name == "whole" else { continue }
            // The next round starts from the bonus token; the totals add up, logits not asked for.
            var plain = VerifyParams()
            let next = try s.verify(got.nextToken, draft: Array(chain[6..<8]), params: &plain)
            XCTAssertEqual(next.nAccepted, 2)
            XCTAssertEqual(next.nextToken, chain[8])
            XCTAssertTrue(next.logits.isEmpty)
            XCTAssertEqual([next.totalRounds, next.totalDrafted, next.totalAccepted], [2, 6, 6])
        }
    }

    /// A sampled verify with the same seed gives the same outcome and random state twice; the
    /// session holds 1 + nAccepted new positions, byte for byte those of a fresh session stepped
    /// through the pending token and the accepted drafts. (At temperature 0.1 these seeds keep 1
    /// or 4 of the 5 greedy drafts on the tiny model.)
    func testVerifySampledReproducible() throws {
        let model = try openTiny()
        let chain = try greedyChain(model, 6).tokens
        let sampler = SamplerParams(temperature: 0.1)
        for seed: UInt64 in 1...6 {
            var outcomes: [(result: VerifyResult, rng: UInt64?, snapshot: [UInt8])] = []
            for _ in 0..<2 {
                let s = try promptedSession(model)
                let before = try s.nPast()
                var params = VerifyParams(mode: .sampled, sampler: sampler, rngState: seed, wantLogits: true)
                let r = try s.verify(chain[0], draft: Array(chain[1..<6]), params: &params)
                XCTAssertEqual(try s.nPast(), before + 1 + r.nAccepted, "seed \(seed)")
                let snapshot = try s.snapshot()
                outcomes.append((r, params.rngState, snapshot))
            }
            assertSameResult(outcomes[0].result, outcomes[1].result, "seed \(seed)")
            XCTAssertEqual(outcomes[0].rng, outcomes[1].rng, "seed \(seed)")
            XCTAssertNotEqual(outcomes[0].rng, seed, "seed \(seed): the random state did not advance")
            XCTAssertEqual(outcomes[0].result.logits.count, model.info.vocabSize)
            let n = outcomes[0].result.nAccepted
            XCTAssertEqual(outcomes[0].snapshot, try steppedSnapshot(model, chain[0...n]), "seed \(seed)")
        }
    }

    /// A verify item of stepSessions, beside a step item, gives the outcome, random state and
    /// session bytes of a lone verify on an identical session, greedy and sampled; the step item
    /// gets the bits of stepBatch alone, and the verify item no logits (its want is unread).
    func testVerifyItemMatchesVerifyAlone() throws {
        let model = try openTiny()
        let chain = try greedyChain(model, 4).tokens
        let draft = [chain[1], chain[2], (chain[3] + 7) % 300]
        for mode in [VerifyMode.greedy, .sampled] {
            let alone = try promptedSession(model), together = try promptedSession(model)
            let stepAlone = try Session(model: model), stepTogether = try Session(model: model)
            let params = VerifyParams(mode: mode, sampler: SamplerParams(temperature: 0.1), rngState: 99, wantLogits: true)
            var aloneParams = params
            let want = try alone.verify(chain[0], draft: draft, params: &aloneParams)
            let wantStep = try stepAlone.stepBatch([0, 80, 265], want: .last)
            var verifyItem = StepItem(session: together, pending: chain[0], draft: draft, params: params)
            verifyItem.want = .all
            var items = [StepItem(session: stepTogether, tokens: [0, 80, 265], want: .last), verifyItem]
            let out = try Session.stepSessions(&items)
            let got = try XCTUnwrap(items[1].result, "\(mode): no result written")
            assertSameResult(got, want, "\(mode)")
            XCTAssertEqual(items[1].verify?.rngState, aloneParams.rngState, "\(mode)")
            if mode == .greedy {
                XCTAssertEqual(got.nAccepted, 2)
                XCTAssertEqual(got.nextToken, chain[3])
            } else {
                XCTAssertNotEqual(items[1].verify?.rngState, 99, "the sampled item's random state did not advance")
            }
            XCTAssertEqual(try together.snapshot(), try alone.snapshot(), "\(mode)")
            XCTAssertEqual(out.count, 2)
            XCTAssertTrue(sameBits(out[0][...], wantStep[...]), "\(mode): the step item differs from stepBatch alone")
            XCTAssertTrue(out[1].isEmpty, "\(mode): the verify item returned logits")
            XCTAssertNil(items[0].result)
        }
    }

    /// Refused verifies change nothing: no session, random state or item.
    func testVerifyRefusals() throws {
        let model = try openTiny()
        let chain = try greedyChain(model, 2).tokens
        let s = try promptedSession(model)
        let before = try s.snapshot()
        let sampler = SamplerParams(temperature: 1)
        let draft = Array(chain[1..<3])

        var noSampler = VerifyParams(mode: .sampled, rngState: 5)
        assertThrows(.nullArgument) { _ = try s.verify(chain[0], draft: draft, params: &noSampler) }
        var noRNG = VerifyParams(mode: .sampled, sampler: sampler)
        assertThrows(.nullArgument) { _ = try s.verify(chain[0], draft: draft, params: &noRNG) }
        // k = 2 rows of the drafter's probabilities are 600 floats.
        var short = VerifyParams(mode: .sampled, sampler: sampler, draftProbs: [Float](repeating: 0, count: 599), rngState: 5)
        do {
            _ = try s.verify(chain[0], draft: draft, params: &short)
            XCTFail("599 floats of draft probabilities were taken")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .bufferTooSmall, "\(error)")
            XCTAssertTrue(error.message.contains("600"), error.message)
        }
        XCTAssertEqual(short.rngState, 5)
        var greedy = VerifyParams()
        assertThrows(.tokenOutOfRange) { _ = try s.verify(chain[0], draft: [chain[1], 300], params: &greedy) }

        let other = try Session(model: model)
        var items = [StepItem(session: other, tokens: [0], want: .last),
                     StepItem(session: s, pending: chain[0], draft: draft,
                              params: VerifyParams(mode: .sampled, sampler: sampler, draftProbs: [], rngState: 5))]
        do {
            _ = try Session.stepSessions(&items)
            XCTFail("an empty draft-probability buffer was taken")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .bufferTooSmall, "\(error)")
            XCTAssertTrue(error.message.contains("item 1: "), error.message)
        }
        XCTAssertNil(items[1].result)
        XCTAssertEqual(items[1].verify?.rngState, 5)
        XCTAssertEqual(try other.nPast(), 0)
        XCTAssertEqual(try s.snapshot(), before)
    }

    /// sample at temperature 0 is argmax; top-k 1 leaves only the argmax at any temperature; a
    /// seed reproduces its draw and advances the state; -inf masks tokens; the repetition penalty
    /// reads `recent`; bad parameters and logits are refused.
    func testSample() throws {
        let logits = try Session(model: try openTiny()).step(0)
        let best = try XCTUnwrap(argmax(logits))
        var rng: UInt64 = 7
        let greedy = try sample(logits, rng: &rng)
        XCTAssertEqual(Int(greedy), best)
        let topK1 = try sample(logits, params: SamplerParams(temperature: 1.5, topK: 1), rng: &rng)
        XCTAssertEqual(Int(topK1), best)

        let hot = SamplerParams(temperature: 1.5)
        var a: UInt64 = 2024, b: UInt64 = 2024
        let drawA = try sample(logits, params: hot, rng: &a), drawB = try sample(logits, params: hot, rng: &b)
        XCTAssertEqual(drawA, drawB)
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a, 2024, "the random state did not advance")

        var masked = [Float](repeating: -.infinity, count: 300)
        masked[7] = 0
        let unmasked = try sample(masked, params: hot, rng: &rng)
        XCTAssertEqual(unmasked, 7)

        // 2.0 / 2 = 1.0 falls below 1.5: HF's rule divides a positive logit of a recent token.
        let penalised = try sample([2, 1.5, 0], params: SamplerParams(repetitionPenalty: 2, recent: [0]), rng: &rng)
        XCTAssertEqual(penalised, 1)

        do {
            _ = try sample(logits, params: SamplerParams(topP: 0), rng: &rng)
            XCTFail("top_p 0 was taken")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .invalidArgument, "\(error)")
            XCTAssertTrue(error.message.contains("top_p"), error.message)
        }
        assertThrows(.invalidArgument) { _ = try sample([0, .nan], rng: &rng) }
        assertThrows(.invalidArgument) { _ = try sample([], rng: &rng) }
    }
}
