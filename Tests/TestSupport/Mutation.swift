import Foundation
import Hashing

/// The seed of a fuzzer or property test: `RR_FUZZ_SEED=N` replays a run, otherwise a fresh one.
/// Printed when the test starts (a trap would leave no other trace) and named in every failure.
public struct FuzzSeed: Sendable, CustomStringConvertible {
    public let value: UInt64

    public init(_ test: String) {
        value = ProcessInfo.processInfo.environment["RR_FUZZ_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        FileHandle.standardError.write(Data("\(test): fuzz seed \(value) (replay: RR_FUZZ_SEED=\(value) scripts/test --filter \(test))\n".utf8))
    }

    public var generator: SplitMix64 { SplitMix64(seed: value) }
    /// For a failure message.
    public var description: String { "replay with RR_FUZZ_SEED=\(value)" }
}

/// Random edits of a real document, for the decoders' property tests.
public enum Mutation {
    /// A byte changed, bytes cut, a JSON token put in, or the rest cut off.
    public static func json(
        _ seed: [UInt8], edits: ClosedRange<Int>, longestCut: Int, truncates: Bool, tokens: [String],
        using generator: inout some RandomNumberGenerator
    ) -> [UInt8] {
        var bytes = seed
        for _ in 0..<Int.random(in: edits, using: &generator) {
            let position = Int.random(in: 0..<max(bytes.count, 1), using: &generator)
            switch Int.random(in: 0..<(truncates ? 4 : 3), using: &generator) {
            case 0 where !bytes.isEmpty: bytes[position] = UInt8.random(in: 0...255, using: &generator)
            case 1 where !bytes.isEmpty:
                bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...longestCut, using: &generator)))
            case 3: bytes = Array(bytes.prefix(position))
            default: bytes.insert(contentsOf: Array(tokens.randomElement(using: &generator)!.utf8), at: min(position, bytes.count))
            }
        }
        return bytes
    }

    /// For binary (ASN.1) documents: a byte changed, bytes cut or put in, a high bit flipped.
    public static func binary(_ seed: [UInt8], edits: ClosedRange<Int>, using generator: inout some RandomNumberGenerator) -> [UInt8] {
        var bytes = seed
        for _ in 0..<Int.random(in: edits, using: &generator) {
            let position = Int.random(in: 0..<max(bytes.count, 1), using: &generator)
            switch Int.random(in: 0..<4, using: &generator) {
            case 0 where !bytes.isEmpty: bytes[position] = UInt8.random(in: 0...255, using: &generator)
            case 1 where !bytes.isEmpty: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...64, using: &generator)))
            case 2: bytes.insert(UInt8.random(in: 0...255, using: &generator), at: min(position, bytes.count))
            default: if !bytes.isEmpty { bytes[position] ^= 0x80 }
            }
        }
        return bytes
    }
}
