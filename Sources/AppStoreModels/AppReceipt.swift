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

/// A receipt's bundle id and its purchases' original transaction ids (the transaction id where
/// the original is absent), first seen first: what a run reads of a receipt locally. Recorded on
/// the receipt row and checked against the app's bundle ids; never used to grant or revoke.
public struct ReceiptIdentifiers: Sendable, Equatable {
    public var bundleId: String?
    public var originalTransactionIds: [String]

    public init(bundleId: String?, originalTransactionIds: [String]) {
        self.bundleId = bundleId
        self.originalTransactionIds = originalTransactionIds
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
        switch try container(input) {
        case .legacy(let bytes): return .legacyTransactionReceipt(try LegacyPlist.decodeTransactionReceipt(bytes))
        case .pkcs7(let bytes): return .appReceipt(try readingPKCS7 { try decodePayload(try payload(ofPKCS7: bytes)) })
        }
    }

    /// Only what a run needs of a receipt: its bundle id and its purchases' original transaction
    /// ids, the same as `decode` gives, but each in-app record is read for two attributes and
    /// nothing else (decoding every field of every record was a third of a run's CPU). So a
    /// record whose other attributes are malformed does not fail here as it does in `decode`.
    public static func identifiers(_ input: [UInt8]) throws(ReceiptDecodingError) -> ReceiptIdentifiers {
        switch try container(input) {
        case .legacy(let bytes):
            let info = try LegacyPlist.decodeTransactionReceipt(bytes).purchaseInfo
            return ReceiptIdentifiers(bundleId: info["bid"], originalTransactionIds: [info["original-transaction-id"] ?? info["transaction-id"]].compactMap { $0 })
        case .pkcs7(let bytes):
            return try readingPKCS7 { try identifiers(ofPayload: try payload(ofPKCS7: bytes)) }
        }
    }

    enum Container {
        case pkcs7([UInt8]), legacy([UInt8])
    }

    /// The receipt's bytes (base64 decoded if it is text) and which of the two kinds it is.
    static func container(_ input: [UInt8]) throws(ReceiptDecodingError) -> Container {
        var bytes = input
        if input.first != 0x30 {
            let text = withoutWhitespace(String(decoding: input, as: UTF8.self))
            if !text.isEmpty, let data = Data(base64Encoded: text) { bytes = Array(data) }
        }
        guard !bytes.isEmpty else { throw ReceiptDecodingError("the receipt is empty") }
        if bytes.first == UInt8(ascii: "{") { return .legacy(bytes) }
        guard bytes.first == 0x30 else {
            throw ReceiptDecodingError("not an app receipt: neither PKCS#7 (which starts with a SEQUENCE) nor an iOS 6 transaction receipt")
        }
        return .pkcs7(bytes)
    }

    /// Any error of the ASN.1 parser, worded as this decoder's.
    static func readingPKCS7<Result>(_ body: () throws -> Result) throws(ReceiptDecodingError) -> Result {
        do {
            return try body()
        } catch let error as ReceiptDecodingError {
            throw error
        } catch {
            throw ReceiptDecodingError("not a valid PKCS#7 receipt: \(error)")
        }
    }

    static func identifiers(ofPayload payload: [UInt8]) throws -> ReceiptIdentifiers {
        var found = ReceiptIdentifiers(bundleId: nil, originalTransactionIds: [])
        var seen = Set<String>()
        try forEachAttribute(payload[...]) { type, value in
            switch type {
            case 2: found.bundleId = try string(value)
            case 17:
                var original: String?, transaction: String?
                try forEachAttribute(value) { type, value in
                    if type == 1705 { original = try string(value) } else if type == 1703 { transaction = try string(value) }
                }
                if let id = original ?? transaction, seen.insert(id).inserted { found.originalTransactionIds.append(id) }
            default: break
            }
        }
        return found
    }

    static let signedDataOID: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]
    static let dataOID: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]

    /// The raw value of the first payload attribute of `type` in a PKCS#7 app receipt (DER or
    /// BER): for attribute types this decoder does not read, such as the simulator's own. Nil
    /// when the receipt has none.
    public static func attribute(_ type: Int64, inPKCS7 bytes: [UInt8]) throws -> [UInt8]? {
        var found: [UInt8]?
        try forEachAttribute(try payload(ofPKCS7: bytes)[...]) { if found == nil && $0 == type { found = Array($1) } }
        return found
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
            case 12: receipt.creationDate = try date(value, field: "receipt_creation_date")
            case 21: receipt.expirationDate = try date(value, field: "expiration_date")
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
            case 1701: purchase.quantity = try count(value, field: "quantity")
            case 1702: purchase.productId = try string(value)
            case 1703: purchase.transactionId = try string(value)
            case 1705: purchase.originalTransactionId = try string(value)
            case 1704: purchase.purchaseDate = try date(value, field: "purchase_date")
            case 1706: purchase.originalPurchaseDate = try date(value, field: "original_purchase_date")
            case 1708: purchase.expiresDate = try date(value, field: "expires_date")
            case 1712: purchase.cancellationDate = try date(value, field: "cancellation_date")
            case 1711: purchase.webOrderLineItemId = try integer(value)
            case 1713: purchase.isTrialPeriod = try integer(value).map { $0 != 0 }
            case 1719: purchase.isInIntroOfferPeriod = try integer(value).map { $0 != 0 }
            case 1721: purchase.promotionalOfferId = try string(value)
            case 1707: purchase.productType = try count(value, field: "product_type")
            default: continue
            }
        }
        return purchase
    }

    static func attributes(_ bytes: [UInt8]) throws -> [(Int64, [UInt8])] {
        var found: [(Int64, [UInt8])] = []
        try forEachAttribute(bytes[...]) { found.append(($0, Array($1))) }
        return found
    }

    /// Calls `body` with each attribute's type and value, in order; the values are slices of
    /// `bytes`, not copies (unless BER split a value into pieces).
    static func forEachAttribute(_ bytes: ArraySlice<UInt8>, _ body: (Int64, ArraySlice<UInt8>) throws -> Void) throws {
        let set = try BER.parse(bytes)
        guard set.identifier == .set, case .constructed(let nodes) = set.content else {
            throw ReceiptDecodingError("the receipt payload is not a SET of attributes")
        }
        for node in nodes {
            guard node.identifier == .sequence, case .constructed(let fields) = node.content else {
                throw ReceiptDecodingError("receipt attribute is not a SEQUENCE")
            }
            var iterator = fields.makeIterator()
            guard let typeNode = iterator.next(), iterator.next() != nil, let valueNode = iterator.next(),
                  let type = try integerNode(typeNode)
            else { throw ReceiptDecodingError("a receipt attribute is incomplete") }
            try body(type, try octetSlice(valueNode))
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
        Array(try octetSlice(node))
    }

    static func octetSlice(_ node: ASN1Node) throws -> ArraySlice<UInt8> {
        guard node.identifier == .octetString else { throw ReceiptDecodingError("expected an OCTET STRING") }
        switch node.content {
        case .primitive(let bytes): return bytes
        case .constructed(let pieces): return ArraySlice(try pieces.flatMap { try octets($0) })
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

    /// A small number (a quantity, a type): one past `Int32` is refused, naming the field.
    static func count(_ value: [UInt8], field: String) throws -> Int? {
        guard let value = try integer(value) else { return nil }
        guard let small = Int32(exactly: value) else { throw ReceiptDecodingError("\(field): \(value) is out of range") }
        return Int(small)
    }

    /// The value of an attribute that holds a DER-encoded UTF8String or IA5String.
    static func string(_ value: [UInt8]) throws -> String? {
        try string(value[...])
    }

    static func string(_ value: ArraySlice<UInt8>) throws -> String? {
        guard !value.isEmpty else { return nil }
        let node = try BER.parse(value)
        guard node.identifier == .utf8String || node.identifier == .ia5String || node.identifier == .printableString,
              case .primitive(let bytes) = node.content
        else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `2020-07-22T18:33:15Z` or with a `+hhmm` offset; an empty string means absent.
    static func date(_ value: [UInt8], field: String) throws -> Date? {
        guard let text = try string(value), !text.isEmpty, let date = parseReceiptDate(text) else { return nil }
        guard Date.appleMilliseconds.contains(date.milliseconds) else {
            throw ReceiptDecodingError("\(field): \(text) is not a date Apple can send (1970 to 9999)")
        }
        return date
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
