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

/// The App Store Server API's configuration (docs/apple.md, "The App Store Server API as the source"). The key file is read once;
/// neither it nor the token made from it is ever printed.
struct AppStoreConnectOptions: ParsableArguments {
    @Option(help: ArgumentHelp("App Store Connect issuer id (default: $APPSTORE_ISSUER_ID).", valueName: "id"))
    var appstoreIssuerId: String?

    @Option(help: ArgumentHelp("In-app purchase key id (default: $APPSTORE_KEY_ID).", valueName: "id"))
    var appstoreKeyId: String?

    @Option(help: ArgumentHelp(
        "The in-app purchase key, a .p8 file (default: $APPSTORE_PRIVATE_KEY_FILE). Never the key itself on the command line.",
        valueName: "path"))
    var appstorePrivateKeyFile: String?

    @Option(help: ArgumentHelp("Server API production address (default: $APPSTORE_API_URL, else https://api.storekit.apple.com).", valueName: "url"))
    var appstoreApiUrl: String?

    @Option(help: ArgumentHelp(
        "Server API sandbox address (default: $APPSTORE_SANDBOX_API_URL, else https://api.storekit-sandbox.apple.com).", valueName: "url"))
    var appstoreSandboxApiUrl: String?

    /// A key is configured: the default source is then `both`.
    var isConfigured: Bool { value(appstorePrivateKeyFile, "APPSTORE_PRIVATE_KEY_FILE") != nil }

    /// Some part of a key is given (its issuer, its id or its file): a key meant, whole or not.
    var isPartlyConfigured: Bool {
        value(appstoreIssuerId, "APPSTORE_ISSUER_ID") != nil || value(appstoreKeyId, "APPSTORE_KEY_ID") != nil || isConfigured
    }

    private func value(_ flag: String?, _ variable: String) -> String? {
        if let flag, !flag.isEmpty { return flag }
        return ProcessInfo.processInfo.environment[variable].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The credentials, or one configuration error naming everything missing at once (never the
    /// key's content). The app's Apple id is among them: without it Apple's production signed data
    /// (a REFUND, a CONSUMPTION_REQUEST) is refused, night after night, by a run that exits 0.
    func credentials(bundleIds: [String], appAppleId: Int64?) throws -> ServerAPICredentials {
        let (issuer, keyId, path) = (value(appstoreIssuerId, "APPSTORE_ISSUER_ID"), value(appstoreKeyId, "APPSTORE_KEY_ID"),
                                     value(appstorePrivateKeyFile, "APPSTORE_PRIVATE_KEY_FILE"))
        let missing = [
            issuer == nil ? "APPSTORE_ISSUER_ID (or --appstore-issuer-id)" : nil,
            keyId == nil ? "APPSTORE_KEY_ID (or --appstore-key-id)" : nil,
            path == nil ? "APPSTORE_PRIVATE_KEY_FILE (or --appstore-private-key-file)" : nil,
            bundleIds.isEmpty ? "APPSTORE_BUNDLE_ID (or --bundle-id)" : nil,
            appAppleId == nil ? "APPSTORE_APP_APPLE_ID (or --app-apple-id; App Store Connect, App Information, Apple ID)" : nil,
        ].compactMap { $0 }
        guard let issuer, let keyId, let path, let bundleId = bundleIds.first, appAppleId != nil else {
            throw ConfigurationError("the App Store Server API needs " + missing.joined(separator: ", "))
        }
        let pem = try SecretFile.read(path, what: "the key file")
        do {
            return try ServerAPICredentials(issuerId: issuer, keyId: keyId, bundleId: bundleId, privateKeyPEM: pem)
        } catch {
            throw ConfigurationError("the key file \(path): \(error)")
        }
    }

    func endpoints() throws -> ServerAPIClient.Endpoints {
        let endpoints = ServerAPIClient.Endpoints(
            production: value(appstoreApiUrl, "APPSTORE_API_URL") ?? ServerAPIClient.Endpoints.apple.production,
            sandbox: value(appstoreSandboxApiUrl, "APPSTORE_SANDBOX_API_URL") ?? ServerAPIClient.Endpoints.apple.sandbox)
        try AppleURL.require(endpoints.production, name: "the Server API URL (--appstore-api-url, APPSTORE_API_URL)")
        try AppleURL.require(endpoints.sandbox, name: "the Server API sandbox URL (--appstore-sandbox-api-url, APPSTORE_SANDBOX_API_URL)")
        return endpoints
    }
}
