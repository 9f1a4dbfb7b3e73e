import AppStoreModels
import Foundation

/// Times the hand-written reader against `JSONDecoder` on real verifyReceipt answers (the
/// fixture files given), each decoder into the models the rules read, in a release build.
@main
struct BenchJSON {
    static func main() throws {
        let files = CommandLine.arguments.dropFirst().filter { $0.hasSuffix(".json") }.sorted()
        var documents: [[UInt8]] = []
        for file in files {
            let bytes = Array(try Data(contentsOf: URL(filePath: file)))
            // Both decoders must read it the same way, or the comparison means nothing.
            let hand = try? AppStoreModels.VerifyReceiptResponse.decode(bytes)
            let codable = try? CodableVerifyReceiptResponse.decode(bytes)
            guard let hand, let codable else { continue }
            guard hand.latestReceiptInfo.map(\.transactionId) == codable.latestReceiptInfo.map(\.transactionId),
                  hand.receipt?.inApp.map(\.transactionId) == codable.receipt?.inApp.map(\.transactionId),
                  hand.latestReceiptInfo.map(\.expiresDate) == codable.latestReceiptInfo.map(\.expiresDate)
            else { throw CocoaError(.coderReadCorrupt, userInfo: [NSDebugDescriptionErrorKey: "the decoders disagree on \(file)"]) }
            documents.append(bytes)
        }
        let bytes = documents.reduce(0) { $0 + $1.count }
        print("\(documents.count) of \(files.count) answers read alike by both decoders, \(bytes) bytes in all")
        func measure(_ name: String, _ decode: ([UInt8]) throws -> Int) rethrows -> Double {
            var rounds = 0
            var checksum = 0
            let clock = ContinuousClock()
            let started = clock.now
            while clock.now - started < .seconds(3) {
                for document in documents { checksum &+= try decode(document) }
                rounds += 1
            }
            let elapsed = clock.now - started
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let perDocument = seconds / Double(rounds * documents.count) * 1e6
            let throughput = Double(rounds * bytes) / seconds / 1e6
            print(String(format: "%@: %.1f µs per answer, %.0f MB/s (%d rounds, checksum %d)", name, perDocument, throughput, rounds, checksum))
            return perDocument
        }
        let hand = try measure("hand-written reader") { try AppStoreModels.VerifyReceiptResponse.decode($0).latestReceiptInfo.count }
        let codable = try measure("JSONDecoder") { try CodableVerifyReceiptResponse.decode($0).latestReceiptInfo.count }
        print(String(format: "JSONDecoder takes %.1fx the reader's time", codable / hand))
    }
}
