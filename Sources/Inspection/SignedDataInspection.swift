import AppStoreModels
import CivilCalendar
import Foundation
import Reconciliation
import SignedData

/// What `inspect` shows of signed data: each signed part's fields and every check with its result.
public struct SignedDataInspection {
    /// One JWS: its kind, its fields as signed (once verified), its checks.
    public struct Part {
        public var name: String
        public var fields: [String: Any]
        /// The same fields for `--json`, numbers and booleans told apart as Apple wrote them.
        public var payload: JSONValue
        /// The payload's JSON as it came, where it was not verified: shown as text, never read.
        public var unverifiedPayload: String?
        public var checks: [SignedDataCheckResult]
    }

    public var parts: [Part]

    public var allPassed: Bool { parts.allSatisfy { $0.checks.allSatisfy(\.passed) } }

    /// The compact JWS in a file: the text itself, or the `signedPayload` of a V2 body.
    public static func signedData(in bytes: [UInt8]) -> String? {
        if let signed = NotificationV2Body.signedPayload(bytes) { return signed }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        // Three parts of base64url whose first decodes to a JSON object: a JWS, however it is written.
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Base64URL.decode(Array(parts[0].utf8)),
              header.first(where: { ![0x20, 0x0A, 0x0D, 0x09].contains($0) }) == UInt8(ascii: "{") else { return nil }
        return text
    }

    public static func inspect(_ jws: String, verifier: SignedDataVerifier) async -> SignedDataInspection {
        // Which kind to verify it as, from the member names alone: no value of it is read before it is verified.
        let names = UnverifiedPayload((try? CompactJWS(jws))?.payload ?? [])
        if names.namesNotificationType {
            let examination = await verifier.examineNotification(signedPayload: jws)
            var parts = [part("notification", examination.notification)]
            if let transaction = examination.transaction { parts.append(part("signedTransactionInfo", transaction)) }
            if let renewal = examination.renewalInfo { parts.append(part("signedRenewalInfo", renewal)) }
            return SignedDataInspection(parts: parts)
        }
        if names.namesTransactionId {
            return SignedDataInspection(parts: [part("transaction", await verifier.examine(jws, as: JWSTransaction.self, environment: .either))])
        }
        return SignedDataInspection(parts: [part("renewal info", await verifier.examine(jws, as: JWSRenewalInfo.self, environment: .either))])
    }

    /// A verified payload's fields (its claims may have failed: it is Apple's all the same); an
    /// unverified one's JSON text as it came.
    private static func part<Payload>(_ name: String, _ examination: SignedDataExamination<Payload>) -> Part {
        guard examination.payload != nil, let json = examination.payloadJSON else {
            return Part(
                name: name, fields: [:], payload: .null,
                unverifiedPayload: examination.payloadJSON.map { String(decoding: $0, as: UTF8.self) }, checks: examination.allResults)
        }
        let fields = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any] ?? [:]
        let payload = try? JSONDecoder().decode(JSONValue.self, from: Data(json))
        return Part(
            name: name, fields: fields, payload: payload.flatMap { $0.isObject ? $0 : nil } ?? .object([:]), unverifiedPayload: nil,
            checks: examination.allResults)
    }

    // MARK: Output

    public func text() -> String {
        var text = ""
        for part in parts {
            text += "\(part.name)\n"
            if let raw = part.unverifiedPayload {
                // Escaped: the text is whoever's sent it, and may not reach the terminal raw.
                text += "  payload, not verified (its JSON as it came; nothing of it was read):\n    "
                    + DisplayText.escaped(String(raw.prefix(4096))) + (raw.count > 4096 ? " ..." : "") + "\n"
            }
            let fields = Self.flatten(part.fields).filter { !$0.key.hasSuffix("signedTransactionInfo") && !$0.key.hasSuffix("signedRenewalInfo") }
            // The fields are what the signer wrote: escaped, so a value cannot forge a line or reach the terminal raw.
            let keys = fields.map { DisplayText.escaped($0.key) }
            let width = keys.map(\.count).max() ?? 0
            for ((key, value), shown) in zip(fields, keys) {
                text += "  " + shown.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                    + DisplayText.escaped(Self.display(key: key, value)) + "\n"
            }
            text += "  checks\n"
            for check in part.checks {
                text += "    " + (check.passed ? "pass" : check.checked ? "FAIL" : "skip") + "  " + check.check.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0)
                    + DisplayText.escaped(check.detail) + "\n"
            }
            text += "\n"
        }
        text += allPassed ? "Every check passed.\n" : "A check failed: a run would not use this data.\n"
        return text
    }

    public func json() -> String {
        struct Check: Encodable {
            let name: String
            let passed: Bool
            /// false: not run, an earlier check failed.
            let checked: Bool
            let detail: String
        }
        struct PartView: Encodable {
            let part: String
            /// null where the payload was not verified.
            let fields: JSONValue
            @Nullable var unverifiedPayload: String?
            let checks: [Check]
        }
        struct Document: Encodable {
            let passed: Bool
            let parts: [PartView]
        }
        let document = Document(passed: allPassed, parts: parts.map { part in
            PartView(part: part.name, fields: part.payload, unverifiedPayload: part.unverifiedPayload, checks: part.checks.map { Check(name: $0.check.rawValue, passed: $0.passed, checked: $0.checked, detail: $0.detail) })
        })
        // Values decoded from JSON text are finite: encoding them again cannot fail.
        return (try? ProgramJSON.pretty(document)) ?? "{}\n"
    }

    /// Nested objects (`data` of a notification) as dotted keys, sorted.
    private static func flatten(_ object: [String: Any], prefix: String = "") -> [(key: String, value: Any)] {
        object.sorted { $0.key < $1.key }.flatMap { key, value -> [(key: String, value: Any)] in
            if let nested = value as? [String: Any] { return flatten(nested, prefix: prefix + key + ".") }
            return [(prefix + key, value)]
        }
    }

    /// Milliseconds since 1970 shown with their time as well.
    private static func display(key: String, _ value: Any) -> String {
        // The value is shown as sent; a date only when it is one Apple can send (a forged 9e18 is not).
        if key.hasSuffix("Date"), let number = value as? NSNumber, let milliseconds = Int64(exactly: number.doubleValue.rounded(.down)),
           Date.appleMilliseconds.contains(milliseconds) {
            return "\(number) (\(Timestamp.format(Date(milliseconds: milliseconds))))"
        }
        return "\(value)"
    }
}
