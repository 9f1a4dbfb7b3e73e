import CivilCalendar
import AppStoreModels
import ArgumentParser
import Foundation
import Reconciliation
import SignedData

struct InspectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Decodes an app receipt or Apple's signed data (JWS) and prints its fields; no network.",
        discussion: """
            Reads from FILE or stdin. An app receipt (base64 text or raw DER/BER bytes) is decoded locally \
            (PKCS#7 + ASN.1); iOS 6 transaction receipts (old-style property lists) are recognised and \
            shown as such. Its signature is not checked: only Apple says whether a receipt is genuine.

            Signed data (a compact JWS: a transaction, a renewal info or a V2 notification payload, or a \
            V2 notification body {"signedPayload": ...}) is decoded and every check of a run is shown with \
            its result: format, algorithm, chain, oid, validity, signature, bundle, app_apple_id, \
            environment; for a notification, those of its signed transaction and renewal info too. The \
            checks use the run's configuration (--apple-root-certificate, --bundle-id, --app-apple-id and \
            their environment variables). Exits 0 when every check passed, 1 when one failed.
            """
    )

    @OptionGroup var app: AppIdentityOptions

    @Argument(help: "The receipt file, or - for stdin.")
    var file: String = "-"

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func run() async throws {
        let bytes: [UInt8]
        if file == "-" {
            bytes = Array(FileHandle.standardInput.readDataToEndOfFile())
        } else {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ValidationError("cannot read \(file)")
            }
            bytes = Array(data)
        }
        if let signed = SignedDataInspection.signedData(in: bytes) {
            let verifier: SignedDataVerifier
            do {
                verifier = try SignedDataVerifier(configuration: .init(
                    trustedRoots: try app.trustedRoots(), bundleIds: Set(app.configuredBundleIds()), appAppleId: try app.configuredAppAppleId()))
            } catch {
                FileHandle.standardError.write(Data("\(error)\n".utf8))
                throw ExitStatus.configuration
            }
            let inspection = await SignedDataInspection.inspect(signed, verifier: verifier)
            print(json ? inspection.json() : inspection.text(), terminator: "")
            if !inspection.allPassed { throw ExitStatus.failed }
            return
        }
        let decoded: DecodedReceipt
        do {
            decoded = try ReceiptDecoder.decode(bytes)
        } catch {
            FileHandle.standardError.write(Data("\(file == "-" ? "stdin" : file): \(error)\n".utf8))
            throw ExitStatus.failed
        }
        print(json ? Self.json(decoded) : Self.table(decoded), terminator: "")
    }

    static func json(_ decoded: DecodedReceipt) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        let data: Data?
        switch decoded {
        case .appReceipt(let receipt): data = try? encoder.encode(["kind": AnyEncodable("app_receipt"), "receipt": AnyEncodable(receipt)])
        case .legacyTransactionReceipt(let legacy):
            data = try? encoder.encode(["kind": AnyEncodable("legacy_transaction_receipt"), "receipt": AnyEncodable(legacy)])
        }
        return String(decoding: data ?? Data(), as: UTF8.self) + "\n"
    }

    static func table(_ decoded: DecodedReceipt) -> String {
        func day(_ date: Date?) -> String { date.map { Timestamp.format($0) } ?? "-" }
        // A receipt's strings are whoever made it: escaped, so none can forge a line or reach the terminal raw.
        func text(_ value: String?) -> String { DisplayText.escaped(value ?? "-") }
        switch decoded {
        case .legacyTransactionReceipt(let legacy):
            var output = "iOS 6 transaction receipt (not an app receipt)\n  environment: \(text(legacy.environment))\n"
            for (key, value) in legacy.purchaseInfo.sorted(by: { $0.key < $1.key }) where key != "signature" {
                output += "  \(text(key)): \(text("\(value)"))\n"
            }
            return output
        case .appReceipt(let receipt):
            var output = """
                App receipt
                  receipt type:         \(text(receipt.receiptType))
                  bundle id:            \(text(receipt.bundleId))
                  app version:          \(text(receipt.appVersion))
                  original app version: \(text(receipt.originalAppVersion))
                  created:              \(day(receipt.creationDate))
                  expires:              \(day(receipt.expirationDate))
                  in-app purchases:     \(receipt.inAppPurchases.count)

                """
            if !receipt.inAppPurchases.isEmpty {
                output += "\n  product | transaction | original | purchased | expires | cancelled\n"
                for purchase in receipt.inAppPurchases {
                    output += "  \(text(purchase.productId)) | \(text(purchase.transactionId)) | \(text(purchase.originalTransactionId)) | "
                        + "\(day(purchase.purchaseDate)) | \(day(purchase.expiresDate)) | \(day(purchase.cancellationDate))\n"
                }
            }
            return output
        }
    }
}

/// Lets one dictionary hold differently typed values for JSON.
struct AnyEncodable: Encodable {
    let encodeValue: (any Encoder) throws -> Void
    init(_ value: some Encodable) { encodeValue = value.encode }
    func encode(to encoder: any Encoder) throws { try encodeValue(encoder) }
}
