// The Swift host of the cross-host state test (protocol: tests/hosts/README.md):
//   packlm-swift-host check MODEL DIR        restore DIR/state.bin, step token 5, compare with
//                                            DIR/next.f32 bit for bit; write DIR/state_swift.bin
//                                            (the state right then); continue greedily and
//                                            compare with DIR/greedy.txt
//   packlm-swift-host chain MODEL DIR FROM   restore DIR/state_FROM.bin (state.bin's positions
//                                            and token 5), continue greedily with greedy.txt's ids
// Exit 0 with "swift: N passed, 0 failed" as the last line, else non-zero naming each failure.
import Foundation
import PackLM

let hostName = "swift"
let stepToken: UInt32 = 5
let greedyLength = 8

func fail(_ message: String) -> Never {
    FileHandle.standardError.write("\(hostName): \(message)\n".data(using: .utf8)!)
    exit(1)
}

struct Tally {
    var passed = 0
    var failed = 0
    mutating func expect(_ ok: Bool, _ message: @autoclosure () -> String) {
        if ok {
            passed += 1
        } else {
            failed += 1
            FileHandle.standardError.write("\(hostName): FAIL: \(message())\n".data(using: .utf8)!)
        }
    }
}

func read(_ path: String) -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else { fail("cannot read \(path)") }
    return [UInt8](data)
}

func readLogits(_ path: String, _ nVocab: Int) -> [Float] {
    let raw = read(path)
    guard raw.count == 4 * nVocab else {
        fail("\(path): \(raw.count) bytes, want \(4 * nVocab) (n_vocab little-endian f32)")
    }
    return (0..<nVocab).map { i in
        let b = raw[4 * i..<4 * i + 4].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        return Float(bitPattern: b)
    }
}

func readGreedy(_ path: String) -> [UInt32] {
    let text = String(decoding: read(path), as: UTF8.self)
    let ids = text.split(whereSeparator: { $0 == "\n" || $0 == " " || $0 == "\r" }).map { word -> UInt32 in
        guard let id = UInt32(word) else { fail("\(path): \"\(word)\" is not a token id") }
        return id
    }
    guard ids.count == greedyLength else { fail("\(path): \(ids.count) ids, want \(greedyLength)") }
    return ids
}

func firstDifference(_ a: [Float], _ b: [Float]) -> Int? {
    if a.count != b.count { return min(a.count, b.count) }
    return a.indices.first { a[$0].bitPattern != b[$0].bitPattern }
}

func restored(_ model: Model, _ path: String) -> Session {
    do {
        let session = try Session(model: model)
        try session.restore(read(path))
        return session
    } catch {
        fail("restore \(path): \(error)")
    }
}

/// Feeds greedy[from-1], compares the argmax with greedy[from], and so on to the end.
func greedy(from start: Int, _ session: Session, _ ids: [UInt32], _ tally: inout Tally) {
    for i in start..<ids.count {
        do {
            let got = argmax(try session.step(ids[i - 1])) ?? -1
            tally.expect(got == Int(ids[i]), "greedy token \(i): \(got), want \(ids[i])")
        } catch {
            fail("step \(ids[i - 1]): \(error)")
        }
    }
}

func check(_ model: Model, _ dir: String) -> Tally {
    var tally = Tally()
    let want = readLogits(dir + "/next.f32", model.info.vocabSize)
    let ids = readGreedy(dir + "/greedy.txt")
    let session = restored(model, dir + "/state.bin")
    do {
        let logits = try session.step(stepToken)
        let diff = firstDifference(logits, want)
        tally.expect(diff == nil, "logits after restore + step \(stepToken) differ from next.f32 at \(diff ?? -1)")
        let out = dir + "/state_\(hostName).bin"
        guard FileManager.default.createFile(atPath: out, contents: Data(try session.snapshot())) else {
            fail("cannot write \(out)")
        }
        let first = argmax(logits) ?? -1
        tally.expect(first == Int(ids[0]), "greedy token 0: \(first), want \(ids[0])")
    } catch {
        fail("\(error)")
    }
    greedy(from: 1, session, ids, &tally)
    return tally
}

func nPast(_ session: Session) -> Int {
    do { return try session.nPast() } catch { fail("n_past: \(error)") }
}

/// state_FROM holds state.bin's positions and token 5, whose logits chose greedy id 0; so
/// stepping greedy id i must give greedy id i + 1 as the argmax, for i = 0..6.
func chain(_ model: Model, _ dir: String, _ from: String) -> Tally {
    var tally = Tally()
    let ids = readGreedy(dir + "/greedy.txt")
    let base = restored(model, dir + "/state.bin")
    let session = restored(model, dir + "/state_\(from).bin")
    tally.expect(nPast(session) == nPast(base) + 1,
                 "state_\(from).bin holds \(nPast(session)) positions, state.bin \(nPast(base)): want one more (token \(stepToken))")
    greedy(from: 1, session, ids, &tally)
    return tally
}

let args = CommandLine.arguments
guard (args.count == 4 && args[1] == "check") || (args.count == 5 && args[1] == "chain") else {
    fail("usage: packlm-swift-host check MODEL DIR | packlm-swift-host chain MODEL DIR FROM")
}
// The files are little-endian and compared as this machine's float bytes.
guard 1.littleEndian == 1 else { fail("refusing to run on a big-endian machine (the files are little-endian)") }
let model: Model
do {
    model = try Model(path: args[2])
} catch {
    fail("\(error)")
}
let tally = args[1] == "check" ? check(model, args[3]) : chain(model, args[3], args[4])
print("\(hostName): \(tally.passed) passed, \(tally.failed) failed")
exit(tally.failed == 0 ? 0 : 1)
