import AppStoreModels
import CivilCalendar
import Crypto
import Foundation
@_spi(CMS) import X509
import SwiftASN1

/// A synthetic receipt shaped like Apple's app receipt, for the demo and the benchmark: PKCS#7
/// SignedData, content attached, signed by a demo chain, around the ASN.1 payload Apple uses (a
/// SET of `SEQUENCE { type, version, value }`): receipt type, bundle id, versions, opaque value,
/// hash, creation date, and one in-app record (type 17) per transaction of the answer's
/// `receipt.in_app`. So the job's local decode does its whole work, as in production, and the
/// request bodies have a real receipt's size.
///
/// The simulator derives Apple's answer from the spec the receipt carries in an attribute of its
/// own (`specAttributeType`, a type Apple does not use and the job's decoder skips).
public enum SimulatedAppReceipt {
    public static let specAttributeType = 1_000_001

    /// Signs every receipt of one seeding: the chain's leaf key.
    public struct Signer: Sendable {
        let leaf: Certificate
        let others: [Certificate]
        let key: Certificate.PrivateKey

        public init(chain: SigningChain) throws {
            leaf = try Certificate(derEncoded: chain.leaf)
            others = [try Certificate(derEncoded: chain.intermediate), try Certificate(derEncoded: chain.root)]
            key = Certificate.PrivateKey(chain.leafKey)
        }
    }

    /// The receipt (DER) for a simulator spec: its in-app records are the ones the simulator's
    /// own answer lists in `receipt.in_app`.
    public static func make(specJSON: [UInt8], signer: Signer, creationDate: Date) throws -> [UInt8] {
        let receipt = try SimulatedReceipt(json: Data(specJSON))
        let answer = try receipt.answer(receiptData: "", environment: receipt.environment, excludeOldTransactions: false)
        let response = try VerifyReceiptResponse.decode(answer)
        let payload = try payload(
            bundleId: response.receipt?.bundleId ?? "com.example.app", environment: receipt.environment,
            inApp: response.receipt?.inApp ?? [], creationDate: creationDate, specJSON: specJSON)
        return try CMS.sign(payload, signatureAlgorithm: .ecdsaWithSHA256, additionalIntermediateCertificates: signer.others,
                            certificate: signer.leaf, privateKey: signer.key, detached: false)
    }

    /// The spec a synthetic receipt carries, in either form: `simulated-receipt:` + JSON, or a
    /// PKCS#7 receipt `make` built; nil for any other bytes.
    public static func embeddedSpec(_ decoded: Data) -> [UInt8]? {
        if decoded.starts(with: AppleSimulator.syntheticPrefix.utf8) {
            return Array(decoded.dropFirst(AppleSimulator.syntheticPrefix.utf8.count))
        }
        return spec(in: Array(decoded))
    }

    /// The spec inside a receipt `make` built; nil for any other bytes.
    public static func spec(in der: [UInt8]) -> [UInt8]? {
        guard der.first == 0x30 else { return nil }
        return try? ReceiptDecoder.attribute(Int64(specAttributeType), inPKCS7: der)
    }

    static func payload(bundleId: String, environment: String, inApp: [Transaction], creationDate: Date, specJSON: [UInt8]) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .set) { set in
            func attribute(_ type: Int, _ value: [UInt8]) throws { try append(type, value, to: &set) }
            try attribute(0, try der(ASN1UTF8String(environment == "Sandbox" ? "ProductionSandbox" : "Production")))
            try attribute(1, try der(1_234_567_890))
            try attribute(2, try der(ASN1UTF8String(bundleId)))
            try attribute(3, try der(ASN1UTF8String("1.0")))
            try attribute(4, Array(SHA256.hash(data: specJSON).prefix(16)))
            try attribute(5, Array(Insecure.SHA1.hash(data: specJSON)))
            try attribute(12, try der(ASN1IA5String(receiptDate(creationDate))))
            try attribute(19, try der(ASN1UTF8String("1.0")))
            for transaction in inApp { try attribute(17, try record(transaction)) }
            try attribute(specAttributeType, specJSON)
        }
        return serializer.serializedBytes
    }

    /// One in-app record: the attributes Apple writes, absent values as Apple writes them (an
    /// empty date string, `INTEGER 0`).
    static func record(_ transaction: Transaction) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .set) { set in
            func attribute(_ type: Int, _ value: [UInt8]) throws { try append(type, value, to: &set) }
            func date(_ value: Date?) throws -> [UInt8] { try der(ASN1IA5String(value.map(receiptDate) ?? "")) }
            try attribute(1701, try der(transaction.quantity ?? 1))
            try attribute(1702, try der(ASN1UTF8String(transaction.productId)))
            try attribute(1703, try der(ASN1UTF8String(transaction.transactionId)))
            try attribute(1704, try date(transaction.purchaseDate))
            try attribute(1705, try der(ASN1UTF8String(transaction.originalTransactionId ?? transaction.transactionId)))
            try attribute(1706, try date(transaction.originalPurchaseDate))
            try attribute(1707, try der(transaction.expiresDate == nil ? 0 : 3))
            try attribute(1708, try date(transaction.expiresDate))
            try attribute(1711, try der(Int(transaction.webOrderLineItemId ?? "0") ?? 0))
            try attribute(1712, try date(transaction.cancellationDate))
            try attribute(1713, try der(transaction.isTrialPeriod == true ? 1 : 0))
            try attribute(1719, try der(transaction.isInIntroOfferPeriod == true ? 1 : 0))
            try attribute(1721, try der(ASN1UTF8String(transaction.promotionalOfferId ?? "")))
        }
        return serializer.serializedBytes
    }

    /// One receipt attribute: `SEQUENCE { type INTEGER, version INTEGER (1), value OCTET STRING }`.
    static func append(_ type: Int, _ value: [UInt8], to set: inout DER.Serializer) throws {
        try set.appendConstructedNode(identifier: .sequence) { sequence in
            try sequence.serialize(type)
            try sequence.serialize(1)
            try sequence.serialize(ASN1OctetString(contentBytes: value[...]))
        }
    }

    static func der(_ value: some DERSerializable) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(value)
        return serializer.serializedBytes
    }

    /// `2026-11-23T16:00:00Z`, as App Store receipts write dates.
    static func receiptDate(_ date: Date) -> String {
        String(Timestamp.format(date).prefix(19)) + "Z"
    }
}
