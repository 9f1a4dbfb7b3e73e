import Foundation
import HTTP
import Testing
import TestSupport

/// TLS verification proven against a real TLS server on loopback: a certificate nobody trusts is
/// refused, the same server is accepted once its CA is trusted, and a trusted certificate for
/// another name is refused.
@Suite struct TLSVerificationTests {
    static func post(_ url: String, trusting file: String? = nil) async -> Result<Int, HTTPError> {
        let client = HTTPClient(configuration: .init(trustedCertificatesFile: file))
        defer { client.shutdown() }
        do {
            let response = try await client.execute(HTTPRequest(
                url: url, method: "POST", body: Array(#"{"receipt-data":"x"}"#.utf8), connectTimeout: .seconds(10), totalTimeout: .seconds(20)))
            return .success(response.status)
        } catch {
            return .failure(error)  // `execute` throws HTTPError only
        }
    }

    @Test func anUntrustedCertificateIsRefusedAndATrustedOneAccepted() async throws {
        let server = try TLSServerProcess()
        defer { server.stop() }
        // The system's roots do not include the test CA: refused before a byte of the body left.
        guard case .failure(let refused) = await Self.post(server.url) else {
            Issue.record("a server with an untrusted certificate was accepted")
            return
        }
        #expect(refused.kind == .tls, "\(refused)")
        // Trusting its CA, the same server answers.
        let accepted = await Self.post(server.url, trusting: server.certificateAuthorityFile)
        #expect((try? accepted.get()) == 200, "\(accepted)")
    }

    @Test func aTrustedCertificateForAnotherNameIsRefused() async throws {
        // Listens on 127.0.0.2; its certificate names 127.0.0.1 only.
        let server = try TLSServerProcess(address: "127.0.0.2")
        defer { server.stop() }
        guard case .failure(let refused) = await Self.post(server.url, trusting: server.certificateAuthorityFile) else {
            Issue.record("a certificate for another name was accepted")
            return
        }
        #expect(refused.kind == .tls, "\(refused)")
    }
}
