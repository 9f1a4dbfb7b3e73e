import Foundation

/// All that may be read of a JWS payload before the JWS is verified (docs/guarantees.md, "Verify
/// before reading"): its `signedDate`, which the validity check needs; a V2
/// notification's `notificationUUID` as text, so that ingestion stores a body once; and which
/// member names are present (never their values), so that `inspect` knows which kind of payload
/// to verify it as. Every other member is skipped unread.
///
/// Total: whatever the bytes, reading returns (a payload that is not a JSON object reads as one
/// with nothing in it and a malformed `signedDate`), and no value is converted in a way that can trap.
public struct UnverifiedPayload: Sendable, Equatable {
    /// The `signedDate` member as found.
    public enum SignedDate: Sendable, Equatable {
        case absent
        case date(Date)
        /// Present, and no time Apple can send: the validity check fails with this detail.
        case malformed(String)
    }

    public var signedDate: SignedDate = .absent
    /// A V2 notification's `notificationUUID`, only where it is a JSON string of plain text.
    public var notificationUUID: String?
    /// Whether the object names a `notificationType` (a V2 notification's payload).
    public var namesNotificationType = false
    /// Whether the object names a `transactionId` (a signed transaction).
    public var namesTransactionId = false

    public init(_ json: some Collection<UInt8>) {
        var read = UnverifiedPayload(signedDate: .absent)
        do {
            try AppleJSONReader.read(json) { reader in
                try reader.readObject { key, reader in
                    if key == "signedDate" {
                        read.signedDate = Self.signedDate(try reader.value())
                    } else if key == "notificationUUID" {
                        let value = try reader.value()
                        read.notificationUUID = value.kind == .string ? Self.plainText(try value.string()) : nil
                    } else {
                        if key == "notificationType" { read.namesNotificationType = true }
                        if key == "transactionId" { read.namesTransactionId = true }
                        try reader.skipValue()
                    }
                }
            }
        } catch {
            // No signedDate can be trusted out of a document that does not read whole.
            read = UnverifiedPayload(signedDate: .malformed("the payload is not a JSON object the job reads: \(error)"))
        }
        self = read
    }

    private init(signedDate: SignedDate) {
        self.signedDate = signedDate
    }

    /// Text fit to be a stored key: 1 to 256 bytes, no control character (PostgreSQL's text
    /// refuses a NUL, and one body's must never fail the batch it came in).
    private static func plainText(_ text: String?) -> String? {
        guard let text, (1...256).contains(text.utf8.count),
              !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return nil }
        return text
    }

    private static func signedDate(_ value: borrowing AppleJSONValue) -> SignedDate {
        let text: String
        switch value.kind {
        case .null: return .absent
        case .number: text = String(decoding: value.bytes, as: UTF8.self)
        case .string:
            guard let string = try? value.string() else { return .malformed("signedDate is not text") }
            text = string
        case .bool, .object, .array: return .malformed("signedDate is not milliseconds since 1970")
        }
        do {
            return .date(try SignedFields.date(text: text, field: "signedDate"))
        } catch let error as AppleJSONError {
            return .malformed(error.description)
        } catch {
            return .malformed("signedDate: \(error)")
        }
    }

    /// The `data.signedTransactionInfo` of a V2 notification's payload, as text: read only once
    /// the notification's chain and signature verified, to check a notification that carries no
    /// `signedDate` at its transaction's (Apple's own verifier does the same).
    public static func signedTransactionInfo(ofNotification json: some Collection<UInt8>) -> String? {
        try? AppleJSONReader.read(json) { reader -> String? in
            var found: String?
            try reader.readObject { key, reader in
                guard key == "data", try reader.peek() == .object else { return try reader.skipValue() }
                try reader.readObject { key, reader in
                    if key == "signedTransactionInfo", try reader.peek() == .string {
                        found = try reader.value().string()
                    } else {
                        try reader.skipValue()
                    }
                }
            }
            return found
        }
    }
}
