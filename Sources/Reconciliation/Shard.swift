/// Shard K (0-based) of N: the accounts whose hash (`iap.in_shard`) falls in K when they are split
/// N ways, for N workers that run together. The one shape of a shard, from the command line
/// (`--shard K/N`) to the SQL, the run lock, the budget and the report (`K/N`).
public struct Shard: Sendable, Hashable, CustomStringConvertible {
    public let index: Int
    public let count: Int

    /// Nil unless 0 <= index < count.
    public init?(_ index: Int, of count: Int) {
        guard count > 0, (0..<count).contains(index) else { return nil }
        self.index = index
        self.count = count
    }

    /// `K/N`, as `--shard` takes it; nil for anything else.
    public init?(argument: String) {
        let parts = argument.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]) else { return nil }
        self.init(index, of: count)
    }

    /// `K/N`: how the report, the run's row and the logs name it.
    public var description: String { "\(index)/\(count)" }
}
