/// Random edits of a real document, for the decoders' property tests: a byte changed, bytes cut,
/// a JSON token put in, or the rest cut off.
enum JSONMutation {
    static func mutate(
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
}
