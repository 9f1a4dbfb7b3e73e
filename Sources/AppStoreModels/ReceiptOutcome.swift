/// How one receipt came out of a run: the words of the reports and of `app_receipts.last_outcome`.
public enum ReceiptOutcome: String, Sendable, Codable, CodingKeyRepresentable, CaseIterable {
    /// Apple answered 0 (or 21006 with a receipt) for this app's bundle, and every value is storable.
    case verified
    /// Apple's or the network's trouble outlasted the attempts: tried again by a later run.
    case deferred
    /// A final answer that is no verification (or one that cannot be stored).
    case failed
    /// The blob is no receipt at all: never sent.
    case invalidReceipt = "invalid_receipt"
    /// Another app's receipt.
    case foreignBundle = "foreign_bundle"
    /// Its account stopped the process three times in a row: set aside, neither decoded nor sent,
    /// until `backfill --retry-quarantined` (docs/guarantees.md, "Hostile input").
    case quarantined
}
