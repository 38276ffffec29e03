import XCTest
@testable import PackLM

final class StepSessionsTests: XCTestCase {
    /// Two sessions with different prompts stepped together give the bits each gives stepped
    /// alone, for the prompts and for the steps after them.
    func testStepSessionsEqualsStepBatch() throws {
        let model = try openTiny()
        let aloneA = try Session(model: model), aloneB = try Session(model: model)
        let togetherA = try Session(model: model), togetherB = try Session(model: model)
        let rounds: [(a: [UInt32], b: [UInt32], wantA: Want, wantB: Want)] = [
            ([0, 41, 283, 77], [0, 80, 265], .all, .last),
            ([5], [7], .last, .last),
            ([272, 9], [11], .none, .all),
        ]
        for (r, round) in rounds.enumerated() {
            let wantA = try aloneA.stepBatch(round.a, want: round.wantA)
            let wantB = try aloneB.stepBatch(round.b, want: round.wantB)
            let got = try Session.stepSessions([
                (session: togetherA, tokens: round.a, want: round.wantA),
                (session: togetherB, tokens: round.b, want: round.wantB),
            ])
            XCTAssertEqual(got.count, 2, "round \(r)")
            XCTAssertEqual(got[0].count, wantA.count, "round \(r)")
            XCTAssertEqual(got[1].count, wantB.count, "round \(r)")
            XCTAssertTrue(sameBits(got[0][...], wantA[...]), "round \(r): item 0 differs from stepBatch alone")
            XCTAssertTrue(sameBits(got[1][...], wantB[...]), "round \(r): item 1 differs from stepBatch alone")
            XCTAssertEqual(try togetherA.nPast(), try aloneA.nPast(), "round \(r)")
            XCTAssertEqual(try togetherB.nPast(), try aloneB.nPast(), "round \(r)")
        }
    }

    /// A session named twice refuses the whole call, naming the second item, and no session
    /// changes; an empty call is refused too.
    func testStepSessionsRefusesAll() throws {
        let model = try openTiny()
        let a = try Session(model: model), b = try Session(model: model)
        _ = try Session.stepSessions([(session: a, tokens: [0, 41, 283], want: .none),
                                      (session: b, tokens: [0, 80], want: .none)])
        let beforeA = try a.snapshot(), beforeB = try b.snapshot()
        do {
            _ = try Session.stepSessions([(session: a, tokens: [5], want: .last),
                                          (session: a, tokens: [6], want: .last),
                                          (session: b, tokens: [7], want: .last)])
            XCTFail("a session named twice was taken")
        } catch let error as PackLMError {
            XCTAssertEqual(error.status, .invalidArgument, "\(error)")
            XCTAssertTrue(error.message.contains("item 1: "), error.message)
        }
        XCTAssertEqual(try a.snapshot(), beforeA)
        XCTAssertEqual(try b.snapshot(), beforeB)
        assertThrows(.invalidArgument) { _ = try Session.stepSessions([]) }
    }

    /// A fork has its source's state and shares its KV; it then steps to a fresh session's bits.
    func testForkStepsLikeAFreshSession() throws {
        let model = try openTiny()
        let a = try Session(model: model), fresh = try Session(model: model)
        _ = try a.stepBatch([0, 41, 283, 77, 9], want: .none)
        _ = try fresh.stepBatch([0, 41, 283, 77, 9], want: .none)
        let f = try a.fork()
        XCTAssertEqual(try f.snapshot(), try a.snapshot())
        XCTAssertEqual(try f.kvBytes(), try a.kvBytes())
        XCTAssertTrue(sameBits(try f.step(11)[...], try fresh.step(11)[...]), "a fork's step differs from a fresh session's")
    }
}
