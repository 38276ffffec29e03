// packlm-swift-chat MODEL PROMPT: answers one prompt with the model's chat template, streaming
// the reply (greedy) as it is decoded.
import Foundation
import PackLM

let args = CommandLine.arguments
guard args.count == 3 else {
    print("usage: packlm-swift-chat MODEL PROMPT")
    exit(2)
}
do {
    let model = try Model(path: args[1])
    let session = try Session(model: model)
    let stream = try Detokenizer(model: model, flags: .skipSpecial)
    let stops = Set(try model.stopTokens())
    var logits = try session.stepBatch(model.tokenize(model.chatApply([ChatMessage(role: "user", content: args[2])])))
    var produced = 0
    while let tok = argmax(logits).map(UInt32.init), !stops.contains(tok), produced < 128 {
        print(try stream.feed(tok), terminator: "")
        logits = try session.step(tok)
        produced += 1
    }
    print(try stream.flush())
} catch {
    print("\(error)")
    exit(1)
}
