import AppStoreModels
import Foundation
import Testing
import TestSupport

/// The JSON fuzz targets know the boundaries (docs/guarantees.md, "Hostile input": fuzzing): each one's
/// dictionary carries every boundary token of the sweep, and its seed corpus holds one input per
/// field of the documents it parses, that field set to a boundary value. The seeds are derived
/// from the sweep's documents; `RR_UPDATE_FUZZ_SEEDS=1` writes them after a field is added.
@Suite struct FuzzCorpusTests {
    static let fuzzTesting = TestPaths.repositoryRoot.appending(path: "FuzzTesting")

    /// The JSON targets, with the documents each parses. `jws` and `inspect` read compact JWS (a
    /// V2 body for `inspect`): their seeds are the signed payloads under a garbage `x5c`, all that
    /// reaches them unsigned; `jws-signed` signs its inputs itself.
    static let targets: [(name: String, documents: [BoundarySweep.Document], form: Form)] = [
        ("verify-receipt", [BoundarySweep.verifyReceiptAnswer, BoundarySweep.legacyVerifyReceiptAnswer], .json),
        ("notification-v1", [BoundarySweep.notificationV1], .json),
        ("server-api", [BoundarySweep.transactionHistory, BoundarySweep.subscriptionStatuses, BoundarySweep.notificationHistory,
                        BoundarySweep.serverAPIError], .json),
        ("jws-signed", signed, .json),
        ("jws", signed, .compactJWS),
        ("inspect", signed, .notificationBody),
    ]

    static let signed = [
        BoundarySweep.signedTransaction, BoundarySweep.signedRenewalInfo,
        BoundarySweep.notificationV2(signedTransactionInfo: "a.b.c", signedRenewalInfo: "a.b.c"),
    ]

    enum Form {
        case json, compactJWS, notificationBody

        func write(_ json: String) -> String {
            let jws = Base64URL.encode(Array(#"{"alg":"ES256","x5c":["MIIB"]}"#.utf8)) + "." + Base64URL.encode(Array(json.utf8)) + ".AAAA"
            switch self {
            case .json: return json
            case .compactJWS: return jws
            case .notificationBody: return #"{"signedPayload":"\#(jws)"}"#
            }
        }
    }

    /// Every boundary value of the sweep as a dictionary token (libFuzzer's tokens are at most 64
    /// bytes: the 400-digit number is in the seeds instead).
    static let boundaryTokens = BoundarySweep.values.map(\.json).filter { $0.utf8.count <= 64 }

    /// The seed files a target must hold: one per field, its value chosen in turn from the sweep's.
    static func seeds(_ target: (name: String, documents: [BoundarySweep.Document], form: Form)) -> [String: String] {
        var seeds: [String: String] = [:]
        var turn = 0
        for document in target.documents {
            for path in document.root.fields {
                let value = BoundarySweep.values[turn % BoundarySweep.values.count]
                turn += 1
                let name = "field-" + document.name.replacingOccurrences(of: " ", with: "-") + "-"
                    + path.joined(separator: ".").replacingOccurrences(of: "[", with: "").replacingOccurrences(of: "]", with: "")
                seeds[name] = target.form.write(document.root.replacing(path[...], with: value.json).json)
            }
        }
        return seeds
    }

    @Test func everyJSONTargetsDictionaryCarriesTheBoundaryTokens() throws {
        for target in Self.targets {
            let dictionary = try String(contentsOf: Self.fuzzTesting.appending(path: "Dictionaries/\(target.name).dict"), encoding: .utf8)
            let tokens = Set(dictionary.split(separator: "\n").filter { $0.hasPrefix("\"") }.map { line in
                String(line.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"").replacingOccurrences(of: "\\\\", with: "\\")
            })
            let missing = Self.boundaryTokens.filter { !tokens.contains($0) }
            #expect(missing.isEmpty, "\(target.name).dict lacks \(missing)")
        }
    }

    @Test func everyJSONTargetsSeedsHoldOneInputPerField() throws {
        let update = ProcessInfo.processInfo.environment["RR_UPDATE_FUZZ_SEEDS"] == "1"
        for target in Self.targets {
            let directory = Self.fuzzTesting.appending(path: "Seeds/\(target.name)")
            let expected = Self.seeds(target)
            if update {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) where file.hasPrefix("field-") {
                    try FileManager.default.removeItem(at: directory.appending(path: file))
                }
                for (name, text) in expected { try Data(text.utf8).write(to: directory.appending(path: name)) }
            }
            let present = Set((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { $0.hasPrefix("field-") }
            #expect(present == Set(expected.keys), "\(target.name): seeds differ from the sweep's fields (RR_UPDATE_FUZZ_SEEDS=1 writes them)")
            for (name, text) in expected where present.contains(name) {
                let stored = try String(contentsOf: directory.appending(path: name), encoding: .utf8)
                #expect(stored == text, "\(target.name)/\(name) is not the sweep's document")
            }
        }
    }
}
