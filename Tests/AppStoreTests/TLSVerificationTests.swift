import AppStore
import AppStoreModels
import Foundation
import HTTP
import Throttling
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

    /// A verifyReceipt client through `url`, trusting `file`: three attempts, quickly retried.
    static func verifyReceipt(_ url: String, trusting file: String) -> VerifyReceiptClient {
        VerifyReceiptClient(
            endpoints: .init(production: url, sandbox: url), sharedSecret: "secret",
            policy: VerificationPolicy(maximumAttempts: 3, backoff: Backoff(base: .milliseconds(5), maximum: .milliseconds(10)),
                                       connectTimeout: .seconds(10), requestTimeout: .seconds(20)),
            gateway: AppleGateway(concurrency: 1, trustedCertificatesFile: file), logger: .quiet)
    }

    /// A network blip that resets the connection during the TLS handshake is a lost connection,
    /// retried like any reset, and the next good answer verifies; a certificate that does not
    /// verify still fails at once, unretried (docs/guarantees.md, "Reliability: what was tried and what held").
    @Test func aHandshakeResetIsRetriedAndABadCertificateIsNot() async throws {
        let answer = #"{"status":0,"environment":"Production","receipt":{"bundle_id":"com.example.app","in_app":[{"transaction_id":"1","original_transaction_id":"1","product_id":"lifetime","purchase_date_ms":"1700000000000","quantity":"1"}]}}"#
        let server = try TLSServerProcess(answer: answer)
        defer { server.stop() }
        // The first two connections are reset as soon as the ClientHello arrives.
        let relay = try TCPCutter(toHost: "127.0.0.1", port: server.port, resettingFirst: 2)
        defer { relay.stop() }
        let url = "https://127.0.0.1:\(relay.port)/verifyReceipt"
        guard case .failure(let cut) = await Self.post(url, trusting: server.certificateAuthorityFile) else {
            Issue.record("a reset handshake was answered")
            return
        }
        #expect(cut.curlCode == 35, "\(cut)")  // CURLE_SSL_CONNECT_ERROR
        #expect(cut.kind == .connectionLost, "\(cut)")

        let client = Self.verifyReceipt(url, trusting: server.certificateAuthorityFile)
        defer { client.gateway.shutdown() }
        let retried = await client.verify(receipt: "cmVjZWlwdA==")
        #expect(retried.receiptOutcome == .verified, "\(retried.result)")
        #expect(retried.attempts == 2)

        // The same server, its CA not trusted: a final TLS failure after one request.
        let untrusted = Self.verifyReceipt(server.url, trusting: "/etc/ssl/certs/ca-certificates.crt")
        defer { untrusted.gateway.shutdown() }
        let refused = await untrusted.verify(receipt: "cmVjZWlwdA==")
        #expect(refused.receiptOutcome == .failed, "\(refused.result)")
        #expect(refused.attempts == 1)
        #expect(refused.requests == 1)
    }
}
