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

    private func value(_ flag: String?, _ variable: String) -> String? {
        if let flag, !flag.isEmpty { return flag }
        return ProcessInfo.processInfo.environment[variable].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The credentials, or a configuration error naming what is missing (never the key's content).
    func credentials(bundleIds: [String]) throws -> ServerAPICredentials {
        guard let issuer = value(appstoreIssuerId, "APPSTORE_ISSUER_ID") else {
            throw ConfigurationError("the Server API needs APPSTORE_ISSUER_ID (or --appstore-issuer-id)")
        }
        guard let keyId = value(appstoreKeyId, "APPSTORE_KEY_ID") else {
            throw ConfigurationError("the Server API needs APPSTORE_KEY_ID (or --appstore-key-id)")
        }
        guard let path = value(appstorePrivateKeyFile, "APPSTORE_PRIVATE_KEY_FILE") else {
            throw ConfigurationError("the Server API needs APPSTORE_PRIVATE_KEY_FILE (or --appstore-private-key-file)")
        }
        guard let bundleId = bundleIds.first else {
            throw ConfigurationError("the Server API needs the app's bundle id (APPSTORE_BUNDLE_ID or --bundle-id)")
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
