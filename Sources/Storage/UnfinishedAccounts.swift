import Foundation
import Postgres
import Reconciliation

/// Poison accounts (docs/guarantees.md, "Hostile input"): the bookkeeping of `iap.unfinished_accounts`. A run marks
/// the accounts it reads before it works on them and clears each one in the transaction that
/// commits its results, so an account left marked is one the process died with in flight. Those
/// suspects are verified again one at a time, each start counted first; the third start in a row
/// that never finished sets the account aside.
public struct UnfinishedAccount: Sendable, Equatable {
    /// Why the account was set aside; nil for a suspect that is still verified (alone). How many
    /// starts it has left unfinished is `startAlone`'s business, in SQL.
    public var quarantineReason: String?

    public init(quarantineReason: String? = nil) {
        self.quarantineReason = quarantineReason
    }
}

extension ReconciliationStore {
    /// Started unfinished this many times in a row, an account is quarantined instead.
    public static let quarantineAfterUnfinishedStarts = 3

    /// The accounts among these that an earlier run started and never finished, or set aside.
    public func unfinished(of accounts: [String]) async throws -> [String: UnfinishedAccount] {
        var result: [String: UnfinishedAccount] = [:]
        for row in try await connection.query("""
            SELECT account_id, quarantine_reason FROM iap.unfinished_accounts WHERE account_id = ANY(\(accounts))
            """) {
            result[try row.decode("account_id")] = UnfinishedAccount(quarantineReason: try row.decode("quarantine_reason"))
        }
        return result
    }

    /// Marks accounts as started by this run, before any of them is worked on: one statement for
    /// a page, committed on its own. An account marked already (a suspect) keeps its count.
    public func markStarted(_ accounts: [String], runId: Int64) async throws {
        guard !accounts.isEmpty else { return }
        try await connection.execute("""
            INSERT INTO iap.unfinished_accounts (account_id, unfinished_starts, run_id)
            SELECT account_id, 1, \(runId) FROM unnest(\(accounts)::text[]) AS account_id
            ON CONFLICT (account_id) DO NOTHING
            """)
    }

    /// One account's receipts and stored entitlements, from one snapshot as a page reads them:
    /// a suspect's, read again when its turn to be verified alone comes.
    public func account(_ accountId: String, maximumReceiptBytes: Int) async throws -> AccountWork {
        try await connection.withTransaction(.snapshotReadOnly) { _ in
            AccountWork(accountId: accountId, receipts: try await receipts(of: [accountId], maximumReceiptBytes: maximumReceiptBytes)[accountId] ?? [],
                        stored: try await entitlements(of: [accountId])[accountId] ?? [])
        }
    }

    /// What `startAlone` decided.
    public enum AloneStart: Sendable, Equatable {
        /// Counted as started: verify it now, alone.
        case process
        /// Started and never finished too many times in a row: set aside, not verified.
        case quarantined(reason: String)
    }

    /// Counts one more start of a suspect account, committed before its work begins (a process
    /// that dies in the middle leaves the count behind); or quarantines it when its earlier
    /// starts never finished `quarantineAfterUnfinishedStarts` times.
    public func startAlone(_ accountId: String, runId: Int64, now: Date) async throws -> AloneStart {
        let limit = Self.quarantineAfterUnfinishedStarts
        let reason = "verifying this account started \(limit) times and never finished: the process died each time (a crash or an out-of-memory kill)"
        let rows = try await connection.query("""
            INSERT INTO iap.unfinished_accounts AS u (account_id, unfinished_starts, run_id) VALUES (\(accountId), 1, \(runId))
            ON CONFLICT (account_id) DO UPDATE SET
                run_id = \(runId),
                unfinished_starts = CASE WHEN u.unfinished_starts >= \(limit) OR u.quarantined_at IS NOT NULL
                                         THEN u.unfinished_starts ELSE u.unfinished_starts + 1 END,
                quarantined_at = CASE WHEN u.quarantined_at IS NOT NULL THEN u.quarantined_at
                                      WHEN u.unfinished_starts >= \(limit) THEN \(now)::timestamptz END,
                quarantine_reason = CASE WHEN u.quarantined_at IS NOT NULL THEN u.quarantine_reason
                                         WHEN u.unfinished_starts >= \(limit) THEN \(reason) END
            RETURNING quarantine_reason
            """)
        if let quarantined = try rows.first?.decode("quarantine_reason", as: String?.self) { return .quarantined(reason: quarantined) }
        return .process
    }

    /// Clears the marks of accounts whose results are being committed, in that transaction.
    /// A quarantined account keeps its row: it stays set aside until released.
    func clearStarted(_ accounts: [String]) async throws {
        guard !accounts.isEmpty else { return }
        try await connection.execute("""
            DELETE FROM iap.unfinished_accounts WHERE account_id = ANY(\(accounts)) AND quarantined_at IS NULL
            """)
    }

    /// Takes back the starts this run counted and did not clear, when it ends without dying (it
    /// completed, was interrupted, or failed with an error): none of them was a death.
    public func takeBackStarts(runId: Int64) async throws {
        try await connection.withTransaction { _ in
            try await connection.execute("""
                DELETE FROM iap.unfinished_accounts
                WHERE run_id = \(runId) AND quarantined_at IS NULL AND unfinished_starts <= 1
                """)
            try await connection.execute("""
                UPDATE iap.unfinished_accounts SET unfinished_starts = unfinished_starts - 1, run_id = NULL
                WHERE run_id = \(runId) AND quarantined_at IS NULL
                """)
            // A notification whose work this run began and never finished: a failure, or a
            // statement a stop cancelled, not a death (one finished keeps no start).
            try await connection.execute("""
                UPDATE iap.notifications SET unfinished_starts = greatest(unfinished_starts - 1, 0)
                WHERE run_id = \(runId) AND processed_at IS NULL AND quarantined_at IS NULL AND unfinished_starts > 0
                """)
        }
    }

    /// Releases every quarantined account (`backfill --retry-quarantined`): its row is deleted and
    /// its receipts are asked for again, as a notification asks. Returns how many accounts.
    public func releaseQuarantinedAccounts(now: Date) async throws -> Int {
        try await connection.withTransaction { _ in
            let released: [String] = try await connection.query("""
                DELETE FROM iap.unfinished_accounts WHERE quarantined_at IS NOT NULL RETURNING account_id
                """).map { try $0.decode("account_id") }
            if !released.isEmpty {
                try await connection.execute("""
                    UPDATE iap.app_receipts SET reverify_requested_at = \(now) WHERE account_id = ANY(\(released))
                    """)
            }
            return released.count
        }
    }
}
