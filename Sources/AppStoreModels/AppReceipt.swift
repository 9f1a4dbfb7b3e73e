import CivilCalendar
import Foundation
import SwiftASN1

/// An app receipt decoded locally: the PKCS#7 (CMS SignedData) container and the ASN.1 SET of
/// attributes inside it, as Apple documents them. It informs (bundle id, original transaction
/// ids); it never grants or revokes: only Apple's verifyReceipt answer does.
///
/// The signature is not checked here: a receipt that decodes may still be forged, which is why
/// every receipt is verified with Apple.
public struct AppReceipt: Sendable, Equatable, Encodable {
    /// `Production`, `ProductionSandbox`, `Xcode` (attribute 0), when present.
    public var receiptType: String?
    public var bundleId: String?
    public var appVersion: String?
    public var originalAppVersion: String?
    public var creationDate: Date?
    public var expirationDate: Date?
    public var inAppPurchases: [InAppPurchase]

    public struct InAppPurchase: Sendable, Equatable, Encodable {
        public var quantity: Int?
        public var productId: String?
        public var transactionId: String?
        public var originalTransactionId: String?
        public var purchaseDate: Date?
        public var originalPurchaseDate: Date?
        public var expiresDate: Date?
        public var cancellationDate: Date?
        public var webOrderLineItemId: Int64?
        public var isTrialPeriod: Bool?
        public var isInIntroOfferPeriod: Bool?
        public var promotionalOfferId: String?
        /// Undocumented attribute 1707: 0 non-consumable, 1 consumable, 2 non-renewing, 3 auto-renewable.
        public var productType: Int?
    }

    /// The original transaction ids of the purchases (the transaction id where the original is absent).
    public var originalTransactionIds: [String] {
        var seen = Set<String>()
        return inAppPurchases.compactMap { $0.originalTransactionId ?? $0.transactionId }.filter { seen.insert($0).inserted }
    }
}

/// An iOS 6 style transaction receipt: base64 of an old-style property list, not PKCS#7.
public struct LegacyTransactionReceipt: Sendable, Equatable, Encodable {
    public var environment: String?
    /// The decoded `purchase-info` dictionary (`transaction-id`, `product-id`, `bid`, ...).
    public var purchaseInfo: [String: String]
}

/// What a stored blob turned out to be.
public enum DecodedReceipt: Sendable, Equatable {
    case appReceipt(AppReceipt)
    case legacyTransactionReceipt(LegacyTransactionReceipt)
}

/// Why a blob could not be read locally. Never a crash: any bytes give a receipt or this.
public struct ReceiptDecodingError: Error, Equatable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

public enum ReceiptDecoder {
    /// Decodes base64 text (line breaks and spaces allowed) or raw DER/BER bytes.
    public static func decode(_ input: [UInt8]) throws(ReceiptDecodingError) -> DecodedReceipt {
        var bytes = input
        if input.first != 0x30 {
            let text = withoutWhitespace(String(decoding: input, as: UTF8.self))
            if !text.isEmpty, let data = Data(base64Encoded: text) { bytes = Array(data) }
        }
        guard !bytes.isEmpty else { throw ReceiptDecodingError("the receipt is empty") }
        if bytes.first == UInt8(ascii: "{") {
            return .legacyTransactionReceipt(try LegacyPlist.decodeTransactionReceipt(bytes))
        }
        guard bytes.first == 0x30 else {
            throw ReceiptDecodingError("not an app receipt: neither PKCS#7 (which starts with a SEQUENCE) nor an iOS 6 transaction receipt")
        }
        do {
            return .appReceipt(try decodePKCS7(bytes))
        } catch let error as ReceiptDecodingError {
            throw error
        } catch {
            throw ReceiptDecodingError("not a valid PKCS#7 receipt: \(error)")
        }
    }

    static let signedDataOID: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]
    static let dataOID: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]

    static func decodePKCS7(_ bytes: [UInt8]) throws -> AppReceipt {
        try decodePayload(try payload(ofPKCS7: bytes))
    }

    /// The raw value of the first payload attribute of `type` in a PKCS#7 app receipt (DER or
    /// BER): for attribute types this decoder does not read, such as the simulator's own. Nil
    /// when the receipt has none.
    public static func attribute(_ type: Int64, inPKCS7 bytes: [UInt8]) throws -> [UInt8]? {
        try attributes(try payload(ofPKCS7: bytes)).first { $0.0 == type }?.1
    }

    /// The receipt payload inside the PKCS#7 container: SignedData's encapsulated content.
    static func payload(ofPKCS7 bytes: [UInt8]) throws -> [UInt8] {
        let root = try BER.parse(bytes)
        let contentInfo = try children(root, expecting: .sequence, what: "ContentInfo")
        guard contentInfo.count >= 2, try objectIdentifier(contentInfo[0]) == signedDataOID else {
            throw ReceiptDecodingError("the PKCS#7 container does not hold SignedData")
        }
        let signedData = try children(try explicit(contentInfo[1]), expecting: .sequence, what: "SignedData")
        guard signedData.count >= 3 else { throw ReceiptDecodingError("SignedData is incomplete") }
        let encapsulated = try children(signedData[2], expecting: .sequence, what: "EncapsulatedContentInfo")
        guard encapsulated.count >= 2, try objectIdentifier(encapsulated[0]) == dataOID else {
            throw ReceiptDecodingError("the signed content is not data: no receipt payload")
        }
        return try octets(try explicit(encapsulated[1]))
    }

    /// The payload: a SET of SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }.
    static func decodePayload(_ payload: [UInt8]) throws -> AppReceipt {
        var receipt = AppReceipt(inAppPurchases: [])
        for (type, value) in try attributes(payload) {
            switch type {
            case 0: receipt.receiptType = try string(value)
            case 2: receipt.bundleId = try string(value)
            case 3: receipt.appVersion = try string(value)
            case 19: receipt.originalAppVersion = try string(value)
            case 12: receipt.creationDate = try date(value)
            case 21: receipt.expirationDate = try date(value)
            case 17: receipt.inAppPurchases.append(try inAppPurchase(value))
            default: continue
            }
        }
        return receipt
    }

    static func inAppPurchase(_ bytes: [UInt8]) throws -> AppReceipt.InAppPurchase {
        var purchase = AppReceipt.InAppPurchase()
        for (type, value) in try attributes(bytes) {
            switch type {
            case 1701: purchase.quantity = try integer(value).map { Int($0) }
            case 1702: purchase.productId = try string(value)
            case 1703: purchase.transactionId = try string(value)
            case 1705: purchase.originalTransactionId = try string(value)
            case 1704: purchase.purchaseDate = try date(value)
            case 1706: purchase.originalPurchaseDate = try date(value)
            case 1708: purchase.expiresDate = try date(value)
            case 1712: purchase.cancellationDate = try date(value)
            case 1711: purchase.webOrderLineItemId = try integer(value)
            case 1713: purchase.isTrialPeriod = try integer(value).map { $0 != 0 }
            case 1719: purchase.isInIntroOfferPeriod = try integer(value).map { $0 != 0 }
            case 1721: purchase.promotionalOfferId = try string(value)
            case 1707: purchase.productType = try integer(value).map { Int($0) }
            default: continue
            }
        }
        return purchase
    }

    static func attributes(_ bytes: [UInt8]) throws -> [(Int64, [UInt8])] {
        let set = try BER.parse(bytes)
        guard set.identifier == .set, case .constructed(let nodes) = set.content else {
            throw ReceiptDecodingError("the receipt payload is not a SET of attributes")
        }
        return try nodes.map { node in
            let fields = try children(node, expecting: .sequence, what: "receipt attribute")
            guard fields.count >= 3, let type = try integerNode(fields[0]) else {
                throw ReceiptDecodingError("a receipt attribute is incomplete")
            }
            return (type, try octets(fields[2]))
        }
    }

    // MARK: - ASN.1 helpers: every shape check throws instead of trapping

    static func children(_ node: ASN1Node, expecting identifier: ASN1Identifier, what: String) throws -> [ASN1Node] {
        guard node.identifier == identifier, case .constructed(let nodes) = node.content else {
            throw ReceiptDecodingError("\(what) is not a \(identifier == .set ? "SET" : "SEQUENCE")")
        }
        return Array(nodes)
    }

    /// The single child of an `[0] EXPLICIT` wrapper.
    static func explicit(_ node: ASN1Node) throws -> ASN1Node {
        guard node.identifier.tagClass == .contextSpecific, case .constructed(let nodes) = node.content,
              let first = nodes.first(where: { _ in true })
        else { throw ReceiptDecodingError("an [0] EXPLICIT field is malformed") }
        return first
    }

    static func objectIdentifier(_ node: ASN1Node) throws -> [UInt8] {
        guard node.identifier == .objectIdentifier, case .primitive(let bytes) = node.content else {
            throw ReceiptDecodingError("expected an OBJECT IDENTIFIER")
        }
        return Array(bytes)
    }

    /// An OCTET STRING's bytes; BER lets it be constructed from pieces (Xcode receipts do this).
    static func octets(_ node: ASN1Node) throws -> [UInt8] {
        guard node.identifier == .octetString else { throw ReceiptDecodingError("expected an OCTET STRING") }
        switch node.content {
        case .primitive(let bytes): return Array(bytes)
        case .constructed(let pieces): return try pieces.flatMap { try octets($0) }
        }
    }

    static func integerNode(_ node: ASN1Node) throws -> Int64? {
        guard node.identifier == .integer, case .primitive(let bytes) = node.content else { return nil }
        guard !bytes.isEmpty, bytes.count <= 8 else { throw ReceiptDecodingError("an INTEGER does not fit 64 bits") }
        var value: Int64 = (bytes.first! & 0x80) != 0 ? -1 : 0
        for byte in bytes { value = (value << 8) | Int64(byte) }
        return value
    }

    /// The value of an attribute that holds a DER-encoded INTEGER.
    static func integer(_ value: [UInt8]) throws -> Int64? {
        guard !value.isEmpty else { return nil }
        return try integerNode(try BER.parse(value))
    }

    /// The value of an attribute that holds a DER-encoded UTF8String or IA5String.
    static func string(_ value: [UInt8]) throws -> String? {
        guard !value.isEmpty else { return nil }
        let node = try BER.parse(value)
        guard node.identifier == .utf8String || node.identifier == .ia5String || node.identifier == .printableString,
              case .primitive(let bytes) = node.content
        else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `2020-07-22T18:33:15Z` or with a `+hhmm` offset; an empty string means absent.
    static func date(_ value: [UInt8]) throws -> Date? {
        guard let text = try string(value), !text.isEmpty else { return nil }
        return parseReceiptDate(text)
    }

    /// `YYYY-MM-DDThh:mm:ss` then `Z`, `+hhmm` or `+hh:mm` (optionally with a fraction).
    public static func parseReceiptDate(_ text: String) -> Date? {
        Timestamp.parse(text)
    }
}

/// The old-style property list text of iOS 6 transaction receipts: `{ "key" = "value"; ... }`.
enum LegacyPlist {
    static func decodeTransactionReceipt(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> LegacyTransactionReceipt {
        let outer = try dictionary(bytes)
        guard let purchaseInfo = outer["purchase-info"] else {
            throw ReceiptDecodingError("an iOS 6 transaction receipt without purchase-info")
        }
        guard let inner = Data(base64Encoded: purchaseInfo.filter { !$0.isWhitespace }) else {
            throw ReceiptDecodingError("the iOS 6 transaction receipt's purchase-info is not base64")
        }
        return LegacyTransactionReceipt(environment: outer["environment"], purchaseInfo: try dictionary(Array(inner)))
    }

    static func dictionary(_ bytes: [UInt8]) throws(ReceiptDecodingError) -> [String: String] {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.trimmingCharacters(in: .whitespacesAndNewlines).hasPrefix("{") else {
            throw ReceiptDecodingError("not an old-style property list")
        }
        var result: [String: String] = [:]
        var scanner = text[...]
        /// The next "quoted" string (backslash escapes the next character); nil when there is none.
        func quoted() -> String? {
            guard let start = scanner.firstIndex(of: "\"") else { return nil }
            var value = ""
            var escaped = false
            var index = scanner.index(after: start)
            while index < scanner.endIndex {
                let character = scanner[index]
                index = scanner.index(after: index)
                if escaped {
                    value.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    scanner = scanner[index...]
                    return value
                } else {
                    value.append(character)
                }
            }
            return nil  // unterminated
        }
        while let key = quoted() {
            guard let equals = scanner.firstIndex(of: "="), scanner[..<equals].allSatisfy(\.isWhitespace),
                  let value = quoted()
            else { throw ReceiptDecodingError("a malformed old-style property list") }
            _ = equals
            result[key] = value
        }
        guard !result.isEmpty else { throw ReceiptDecodingError("an empty old-style property list") }
        return result
    }
}
