import Foundation

/// A stored `latest_receipt` blob as text: what is sent to Apple, and what is refused before.
public enum ReceiptBlob {
    /// The blob as it will be sent (whitespace removed), or why it is not a receipt.
    public static func normalized(_ blob: String, maximumBytes: Int) -> Swift.Result<String, ReceiptBlobError> {
        let compact = withoutWhitespace(blob)
        guard !compact.isEmpty else { return .failure(.empty) }
        guard compact.utf8.count <= maximumBytes else { return .failure(.tooLarge(bytes: compact.utf8.count, limit: maximumBytes)) }
        guard allBytes(of: compact, satisfy: isBase64Byte), let data = Data(base64Encoded: compact), !data.isEmpty else {
            return .failure(.notBase64)
        }
        return .success(compact)
    }
}

/// Why a stored blob is not sent to Apple.
public enum ReceiptBlobError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case notBase64
    case tooLarge(bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case .empty: "the receipt is empty"
        case .notBase64: "the receipt is not base64"
        case .tooLarge(let bytes, let limit): "the receipt is \(bytes) bytes, over the \(limit)-byte limit"
        }
    }
}

/// The blob without ASCII spaces and line breaks (by bytes: blobs are ASCII when valid, and
/// a Character-level filter costs more than the rest of the check).
public func withoutWhitespace(_ text: String) -> String {
    guard !allBytes(of: text, satisfy: { !isWhitespaceByte($0) }) else { return text }
    return String(decoding: text.utf8.filter { !isWhitespaceByte($0) }, as: UTF8.self)
}

private func isWhitespaceByte(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
}

/// Over the string's contiguous bytes: `UTF8View.allSatisfy` and `contains(where:)` went through
/// the generic `Sequence` path, a byte at a time, and were 14 % of a run's client CPU once
/// receipts had their real size (5-10 KB, scanned three times per receipt).
private func allBytes(of text: String, satisfy predicate: (UInt8) -> Bool) -> Bool {
    if let result = text.utf8.withContiguousStorageIfAvailable({ bytes in
        for byte in bytes where !predicate(byte) { return false }
        return true
    }) {
        return result
    }
    return text.utf8.allSatisfy(predicate)
}

private func isBase64Byte(_ byte: UInt8) -> Bool {
    (65...90).contains(byte) || (97...122).contains(byte) || (48...57).contains(byte) || byte == 43 || byte == 47 || byte == 61
}
