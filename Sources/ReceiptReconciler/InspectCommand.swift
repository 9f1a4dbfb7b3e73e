import AppStoreModels
import ArgumentParser
import Foundation
import Inspection
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

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        _ = logging.bootstrap()
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
        print(json ? ReceiptInspection.json(decoded) : ReceiptInspection.table(decoded), terminator: "")
    }
}
