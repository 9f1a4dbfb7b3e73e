import Foundation

/// A JWS in compact serialization (`header.payload.signature`, each base64url) as Apple signs
/// transactions, renewal infos and notifications: split and decoded, not verified. Nothing read
/// from it may be used before `SignedData` has verified it.
public struct CompactJWS: Sendable {
    /// The protected header: `alg` and the `x5c` chain (DER, leaf first).
    public struct Header: Sendable {
        public var algorithm: String?
        /// Certificates as `x5c` carries them (standard base64 of DER), leaf first.
        public var certificateChain: [String]?
    }

    public var header: Header
    /// The payload's bytes (JSON), as signed.
    public var payload: [UInt8]
    /// The signature's bytes; for ES256 the raw 64-byte `r || s`.
    public var signature: [UInt8]
    /// The ASCII bytes the signature covers: `header.payload` as they came.
    public var signingInput: [UInt8]

    /// Why a text is no compact JWS (verification check `format`).
    public struct Malformed: Error, CustomStringConvertible {
        public var description: String
    }

    /// A JWS larger than this is refused unread: Apple's, chain included, are a few kilobytes.
    public static let maximumSize = 256 * 1024
    /// `x5c` holds more certificates than this only in a hostile header.
    public static let maximumChainLength = 8

    /// Splits `text` (surrounding ASCII white space ignored) and decodes its three parts.
    public init(_ text: String) throws(Malformed) {
        var utf8 = Array(text.utf8)
        guard utf8.count <= Self.maximumSize else {
            throw Malformed(description: "\(utf8.count) bytes, more than the \(Self.maximumSize) a signed payload may have")
        }
        while let last = utf8.last, Self.isWhitespace(last) { utf8.removeLast() }
        let start = utf8.firstIndex { !Self.isWhitespace($0) } ?? utf8.endIndex
        let parts = utf8[start...].split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw Malformed(description: "\(parts.count) part(s) separated by dots, a compact JWS has 3")
        }
        guard let headerBytes = Base64URL.decode(parts[0]) else { throw Malformed(description: "the header is not base64url") }
        guard let payload = Base64URL.decode(parts[1]) else { throw Malformed(description: "the payload is not base64url") }
        guard let signature = Base64URL.decode(parts[2]) else { throw Malformed(description: "the signature is not base64url") }
        do {
            header = try AppleJSONReader.read(headerBytes) { reader in try Header(reading: &reader) }
        } catch {
            throw Malformed(description: "the header is not a JSON object: \(error)")
        }
        guard let chain = header.certificateChain, !chain.isEmpty else {
            throw Malformed(description: "the header has no x5c certificate chain")
        }
        guard chain.count <= Self.maximumChainLength else {
            throw Malformed(description: "x5c holds \(chain.count) certificates")
        }
        self.payload = payload
        self.signature = signature
        self.signingInput = Array(utf8[parts[0].startIndex..<parts[1].endIndex])
    }

    private static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    /// The certificates of `x5c`, DER, leaf first; nil if one is not base64.
    public var certificates: [[UInt8]]? {
        guard let chain = header.certificateChain else { return nil }
        var certificates: [[UInt8]] = []
        for entry in chain {
            guard let der = Data(base64Encoded: entry) else { return nil }
            certificates.append(Array(der))
        }
        return certificates
    }
}

extension CompactJWS.Header {
    fileprivate init(reading reader: inout AppleJSONReader) throws {
        var algorithm: String?
        var chain: [String]?
        try reader.readObject { key, reader in
            if key == "alg" {
                algorithm = try reader.value().string()
            } else if key == "x5c" {
                var entries: [String] = []
                try reader.readArray { reader in
                    guard entries.count <= CompactJWS.maximumChainLength else { return try reader.skipValue() }
                    guard let entry = try reader.value().string() else { throw AppleJSONError(description: "a null in x5c") }
                    entries.append(entry)
                }
                chain = entries
            } else {
                try reader.skipValue()
            }
        }
        self.init(algorithm: algorithm, certificateChain: chain)
    }
}

/// base64url without padding (RFC 7515 section 2), padding tolerated.
public enum Base64URL {
    public static func decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        var standard = [UInt8]()
        standard.reserveCapacity(text.count + 3)
        for byte in text {
            switch byte {
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            case UInt8(ascii: "+"), UInt8(ascii: "/"): return nil
            default: standard.append(byte)
            }
        }
        while standard.last == UInt8(ascii: "=") { standard.removeLast() }
        while standard.count % 4 != 0 { standard.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(standard)).map(Array.init)
    }

    public static func decode(_ text: [UInt8]) -> [UInt8]? {
        decode(text[...])
    }

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var text = Data(bytes).base64EncodedString()
        while text.hasSuffix("=") { text.removeLast() }
        return String(text.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }
}
