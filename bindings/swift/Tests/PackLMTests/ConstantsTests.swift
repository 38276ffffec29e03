import Foundation
import XCTest
@testable import PackLM

/// Every macro of include/packlm.h is a constant of this package with the header's value, or is
/// left out for a stated reason. Status, the flags, GrammarKind, Pooling, Constraint.maxGrammarBytes
/// and abiVersion are built from the imported macros; Backend, Precision, Want and VerifyMode are enums, whose raw values Swift requires to
/// be literals, so this test is what holds those to the header.
final class ConstantsTests: XCTestCase {
    /// The constants this package defines for the header's macros, by their names there.
    let exposed: [String: UInt64] = [
        "PACKLM_OK": UInt64(Status.ok.rawValue),
        "PACKLM_ERR_NULL_ARGUMENT": UInt64(Status.nullArgument.rawValue),
        "PACKLM_ERR_INVALID_ARGUMENT": UInt64(Status.invalidArgument.rawValue),
        "PACKLM_ERR_IO": UInt64(Status.io.rawValue),
        "PACKLM_ERR_FORMAT": UInt64(Status.format.rawValue),
        "PACKLM_ERR_UNSUPPORTED": UInt64(Status.unsupported.rawValue),
        "PACKLM_ERR_TENSOR": UInt64(Status.tensor.rawValue),
        "PACKLM_ERR_TOKEN_OUT_OF_RANGE": UInt64(Status.tokenOutOfRange.rawValue),
        "PACKLM_ERR_CONTEXT_OVERFLOW": UInt64(Status.contextOverflow.rawValue),
        "PACKLM_ERR_BUFFER_TOO_SMALL": UInt64(Status.bufferTooSmall.rawValue),
        "PACKLM_ERR_TOKENIZER": UInt64(Status.tokenizer.rawValue),
        "PACKLM_ERR_BACKEND_UNAVAILABLE": UInt64(Status.backendUnavailable.rawValue),
        "PACKLM_ERR_ABORTED": UInt64(Status.aborted.rawValue),
        "PACKLM_ERR_SNAPSHOT": UInt64(Status.snapshot.rawValue),
        "PACKLM_ERR_UTF8": UInt64(Status.utf8.rawValue),
        "PACKLM_ERR_PANIC": UInt64(Status.panic.rawValue),
        "PACKLM_ERR_SESSION_BUSY": UInt64(Status.sessionBusy.rawValue),
        "PACKLM_ERR_LIMIT_EXCEEDED": UInt64(Status.limitExceeded.rawValue),
        "PACKLM_ERR_SESSION_POISONED": UInt64(Status.sessionPoisoned.rawValue),
        "PACKLM_ERR_UNSUPPORTED_PRECISION": UInt64(Status.unsupportedPrecision.rawValue),
        "PACKLM_ERR_OUT_OF_MEMORY": UInt64(Status.outOfMemory.rawValue),
        "PACKLM_ERR_NON_FINITE": UInt64(Status.nonFinite.rawValue),
        "PACKLM_BACKEND_HOST": UInt64(Backend.host.rawValue),
        "PACKLM_BACKEND_REFERENCE": UInt64(Backend.reference.rawValue),
        "PACKLM_BACKEND_GPU": UInt64(Backend.gpu.rawValue),
        "PACKLM_BACKEND_ACCELERATOR": UInt64(Backend.accelerator.rawValue),
        "PACKLM_BACKEND_NPU": UInt64(Backend.npu.rawValue),
        "PACKLM_PRECISION_DEFAULT": UInt64(Precision.default.rawValue),
        "PACKLM_PRECISION_EXACT": UInt64(Precision.exact.rawValue),
        "PACKLM_PRECISION_FAST": UInt64(Precision.fast.rawValue),
        "PACKLM_WANT_LAST": UInt64(Want.last.rawValue),
        "PACKLM_WANT_ALL": UInt64(Want.all.rawValue),
        "PACKLM_WANT_NONE": UInt64(Want.none.rawValue),
        "PACKLM_MAX_STEP_ITEMS": UInt64(Session.maxStepItems),
        "PACKLM_VERIFY_GREEDY": UInt64(VerifyMode.greedy.rawValue),
        "PACKLM_VERIFY_SAMPLED": UInt64(VerifyMode.sampled.rawValue),
        "PACKLM_GRAMMAR_JSON_SCHEMA": UInt64(GrammarKind.jsonSchema.rawValue),
        "PACKLM_GRAMMAR_LARK": UInt64(GrammarKind.lark.rawValue),
        "PACKLM_GRAMMAR_REGEX": UInt64(GrammarKind.regex.rawValue),
        "PACKLM_GRAMMAR_GBNF": UInt64(GrammarKind.gbnf.rawValue),
        "PACKLM_MAX_GRAMMAR_BYTES": UInt64(Constraint.maxGrammarBytes),
        "PACKLM_TOKENIZE_ADD_SPECIAL": UInt64(TokenizeFlags.addSpecial.rawValue),
        "PACKLM_TOKENIZE_PARSE_SPECIAL": UInt64(TokenizeFlags.parseSpecial.rawValue),
        "PACKLM_DETOKENIZE_SKIP_SPECIAL": UInt64(DetokenizeFlags.skipSpecial.rawValue),
        "PACKLM_ABI_VERSION": UInt64(abiVersion),
        "PACKLM_POOLING_DEFAULT": UInt64(bitPattern: Int64(Pooling.default.rawValue)),
        "PACKLM_POOLING_NONE": UInt64(Pooling.perToken.rawValue),
        "PACKLM_POOLING_MEAN": UInt64(Pooling.mean.rawValue),
        "PACKLM_POOLING_CLS": UInt64(Pooling.cls.rawValue),
        "PACKLM_POOLING_LAST": UInt64(Pooling.last.rawValue),
    ]

    /// The header's macros this package leaves out, and why.
    let notExposed: [String: String] = [
        "PACKLM_H": "the include guard",
        "PACKLM_VERSION": "libraryVersion gives the loaded library's version",
        "PACKLM_VERSION_MAJOR": "as PACKLM_VERSION",
        "PACKLM_VERSION_MINOR": "as PACKLM_VERSION",
        "PACKLM_VERSION_PATCH": "as PACKLM_VERSION",
        "PACKLM_LOG_DEBUG": "this package sets no log callback",
        "PACKLM_LOG_INFO": "this package sets no log callback",
        "PACKLM_LOG_WARN": "this package sets no log callback",
        "PACKLM_DEFAULT_MAX_TOKENIZE_BYTES": "this package does not change the tokenize limit",
    ]

    /// `#define PACKLM_X VALUE` lines of include/packlm.h: name -> value text ("" when none).
    func headerMacros() throws -> [String: String] {
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("include/packlm.h"), encoding: .utf8)
        var macros: [String: String] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("#define PACKLM_") {
            let rest = line.dropFirst("#define ".count)
            let name = rest.prefix(while: { $0 == "_" || $0.isLetter || $0.isNumber })
            macros[String(name)] = rest.dropFirst(name.count).trimmingCharacters(in: .whitespaces)
        }
        return macros
    }

    /// The value of a macro's text: a plain number (a negative one, such as
    /// PACKLM_POOLING_DEFAULT's -1, as its two's complement in 64 bits), or `(N << M)` as cbindgen
    /// writes a Rust constant `N << M` (PACKLM_MAX_GRAMMAR_BYTES); nil for anything else.
    func macroValue(_ text: String) -> UInt64? {
        if let v = UInt64(text) { return v }
        if let v = Int64(text) { return UInt64(bitPattern: v) }
        guard text.hasPrefix("("), text.hasSuffix(")") else { return nil }
        let parts = text.dropFirst().dropLast().components(separatedBy: " << ")
        guard parts.count == 2, let v = UInt64(parts[0]), let shift = UInt64(parts[1]), shift < 64,
              (v << shift) >> shift == v else { return nil }
        return v << shift
    }

    func testConstantsMatchHeader() throws {
        let macros = try headerMacros()
        XCTAssertGreaterThanOrEqual(macros.count, 45, "the parse of include/packlm.h found \(macros.count) macros")
        for (name, value) in macros.sorted(by: { $0.key < $1.key }) {
            if let got = exposed[name] {
                XCTAssertNil(notExposed[name], "\(name) is both exposed and listed as left out")
                XCTAssertEqual(macroValue(value), got, "\(name): this package has \(got), the header \(value)")
            } else {
                XCTAssertNotNil(notExposed[name],
                                "\(name) of include/packlm.h is neither a constant of this package nor listed as left out")
            }
        }
        for name in exposed.keys.sorted() + notExposed.keys.sorted() {
            XCTAssertNotNil(macros[name], "\(name) is not a macro of include/packlm.h")
        }
    }
}
