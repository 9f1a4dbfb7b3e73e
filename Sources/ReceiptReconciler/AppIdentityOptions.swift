import AppStore
import CommandLineValues
import AppStoreModels
import ArgumentParser
import Foundation
import Jobs
import Reconciliation
import SignedData
import Storage
import Throttling

/// Who the app is, for the checks on receipts and on Apple's signed data (docs/notifications.md, "Signed data and Server Notifications V2").
struct AppIdentityOptions: ParsableArguments {
    @Option(name: .customLong("bundle-id"), help: ArgumentHelp(
        "The app's bundle id (repeatable; default: $APPLE_BUNDLE_ID and $APPSTORE_BUNDLE_ID, comma-separated). A receipt of another bundle is foreign_bundle, a failure for its account; signed data of another bundle is rejected (jws_invalid: bundle). With none, each receipt row's bundle_id is the app's, and signed data is rejected.",
        valueName: "id"))
    var bundleIds: [String] = []

    @Option(help: ArgumentHelp(
        "The app's Apple id (default: $APPSTORE_APP_APPLE_ID). Production V2 notifications must carry it (jws_invalid: app_apple_id).",
        valueName: "number"))
    var appAppleId: Int64?

    @Option(name: .customLong("apple-root-certificate"), help: ArgumentHelp(
        "A trusted root for Apple's signed data, DER or PEM (repeatable). Replaces the built-in Apple Root CA - G3: for tests and the simulator (simulate-apple writes its root.der).",
        valueName: "file"))
    var appleRootCertificates: [String] = []

    /// `--bundle-id`, else `APPLE_BUNDLE_ID` and `APPSTORE_BUNDLE_ID` (comma-separated).
    func configuredBundleIds() -> [String] {
        if !bundleIds.isEmpty { return bundleIds }
        let environment = ProcessInfo.processInfo.environment
        let variables = [environment["APPLE_BUNDLE_ID"], environment["APPSTORE_BUNDLE_ID"]].compactMap { $0 }.joined(separator: ",")
        var seen = Set<String>()
        return variables.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && seen.insert($0).inserted }
    }

    func configuredAppAppleId() throws -> Int64? {
        if let appAppleId { return appAppleId }
        guard let text = ProcessInfo.processInfo.environment["APPSTORE_APP_APPLE_ID"], !text.isEmpty else { return nil }
        guard let id = Int64(text.trimmingCharacters(in: .whitespaces)), id > 0 else {
            throw ConfigurationError("APPSTORE_APP_APPLE_ID must be the app's numeric Apple id")
        }
        return id
    }

    /// The roots given, DER (PEM accepted), else Apple Root CA - G3; each one checked to be a certificate.
    func trustedRoots() throws -> [[UInt8]] {
        guard !appleRootCertificates.isEmpty else { return [AppleRootCertificates.appleRootCAG3] }
        let roots = try appleRootCertificates.map { path -> [UInt8] in
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError("cannot read the root certificate \(path)")
            }
            let text = String(decoding: data, as: UTF8.self)
            guard text.contains("-----BEGIN CERTIFICATE-----") else { return Array(data) }
            let base64 = text.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1]
                .components(separatedBy: "-----END CERTIFICATE-----")[0].filter { !$0.isWhitespace }
            guard let der = Data(base64Encoded: base64) else { throw ConfigurationError("\(path) is not a PEM certificate") }
            return Array(der)
        }
        do {
            _ = try SignedDataVerifier(configuration: .init(trustedRoots: roots, bundleIds: []))
        } catch {
            throw ConfigurationError("--apple-root-certificate: \(error)")
        }
        return roots
    }
}

extension AppleURL {
    /// `check`, as the command's configuration error (exit 2).
    static func require(_ text: String, name: String) throws {
        do {
            try check(text, name: name)
        } catch let refused as AppleURL.Refused {
            throw ConfigurationError(refused.description)
        }
    }
}
