import Reconciliation

/// What one committed batch of applied corrections says on `NOTIFY iap_corrections`
/// (docs/events.md). Small by construction: a batch's ranges and counts, never its rows, so it
/// stays far under PostgreSQL's 8000-byte payload limit whatever the batch size; a listener
/// reads the rows with `corrections --after`.
public struct CorrectionsEvent: Encodable, Sendable, Equatable {
    /// The channel: `LISTEN iap_corrections`.
    public static let channel = "iap_corrections"

    public var runId: Int64
    /// How many corrections the batch applied, and of which kind (`grant`, `revoke`, ...).
    public var applied: Int
    public var kinds: [String: Int]
    /// The batch's `applied_seq` range: a consumer at `firstAppliedSeq - 1` reads exactly these.
    public var firstAppliedSeq: Int64
    public var lastAppliedSeq: Int64
    /// The batch's correction ids (`iap.corrections.id`), lowest and highest.
    public var firstId: Int64
    public var lastId: Int64

    enum CodingKeys: String, CodingKey {
        case runId = "run_id", applied, kinds, firstAppliedSeq = "first_applied_seq", lastAppliedSeq = "last_applied_seq"
        case firstId = "first_id", lastId = "last_id"
    }

    /// The event of a batch; nil for a batch that applied nothing (no event is sent).
    init?(runId: Int64, applied corrections: [(id: Int64, seq: Int64, kind: String)]) {
        guard !corrections.isEmpty else { return nil }
        self.runId = runId
        applied = corrections.count
        kinds = Dictionary(corrections.map { ($0.kind, 1) }, uniquingKeysWith: +)
        firstAppliedSeq = corrections.map(\.seq).min()!
        lastAppliedSeq = corrections.map(\.seq).max()!
        firstId = corrections.map(\.id).min()!
        lastId = corrections.map(\.id).max()!
    }
}
