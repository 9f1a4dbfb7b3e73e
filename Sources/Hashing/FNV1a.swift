/// FNV-1a, 64 bits: the same bytes give the same value in every process and on every machine
/// (Swift's `Hasher` is seeded per process), for checksums the database keeps (migrations, the
/// ledger digest). Not for anything an attacker chooses to collide.
public struct FNV1a: Sendable {
    /// The hash so far.
    public var value: UInt64 = 0xcbf2_9ce4_8422_2325

    public init() {}

    public mutating func combine(_ byte: UInt8) {
        value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
    }

    /// A concrete `String`, over its contiguous bytes: the ledger digest hashes every field of
    /// every row, and a generic `StringProtocol` walk (unspecialized across modules) cost 15 %
    /// of a run's client CPU.
    public mutating func combine(_ text: String) {
        var text = text
        text.withUTF8 { bytes in
            for byte in bytes { value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        }
    }

    /// The value as 16 hexadecimal digits.
    public var hex: String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
