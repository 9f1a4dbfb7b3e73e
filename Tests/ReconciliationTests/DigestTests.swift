import Hashing
import Testing

/// The stored digests must be the same in every process and on every machine: each value here
/// comes from Austin Appleby's reference C code (MurmurHash2.cpp, MurmurHash64A, seed 0),
/// compiled and run on its own, not from this implementation.
@Suite struct DigestTests {
    static let reference: [(String, UInt64)] = [
        ("", 0x0000_0000_0000_0000),
        ("a", 0x0717_17d2_d36b_6b11),
        ("abcdefg", 0x241a_a52b_0a62_005d),  // tail only
        ("abcdefgh", 0xafdb_0257_ff41_aa98),  // one word, no tail
        ("abcdefghi", 0xc9b9_d843_5614_6ac2),  // a word and a byte
        ("MIIT0QYJKoZIhvcNAQcCoIITwjCCE74CAQExCzAJBgUrDgMCGgUAMIIDcgYJKoZIhvcNAQcBoIIDYwSCA18xggNbMAoCAQgCAQEEAhYAMAoCARQCAQEEAgwAMAsCAQEC",
         0x788d_8862_f1c1_de1f),
    ]

    @Test(arguments: reference.indices)
    func murmurHash64AMatchesTheReference(_ index: Int) {
        let (text, expected) = Self.reference[index]
        #expect(MurmurHash64A.digest(text) == expected)
    }

    @Test func murmurHash64AMatchesTheReferenceOnTenThousandBytes() {
        let bytes = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        #expect(bytes.withUnsafeBytes { MurmurHash64A.digest($0) } == 0x0a0b_28f3_0bf2_c3da)
    }

    /// Every byte counts, wherever it sits in a word or the tail.
    @Test func oneChangedByteChangesTheDigest() {
        let blob = Array(String(repeating: "MIIT0QYJKoZIhvcNAQcCoIIT", count: 40).utf8) + Array("abc".utf8)
        let original = blob.withUnsafeBytes { MurmurHash64A.digest($0) }
        for position in [0, 5, 7, 8, 500, blob.count - 4, blob.count - 1] {
            var changed = blob
            changed[position] ^= 0x01
            #expect(changed.withUnsafeBytes { MurmurHash64A.digest($0) } != original, "byte \(position)")
        }
    }
}
