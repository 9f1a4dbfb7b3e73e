import AppStoreModels
import Foundation
import Reconciliation
import Storage
import Testing

/// The ledger refresh window and the digest's version: what makes rows edited outside the job
/// heal, and a change of the digest's meaning rewrite every ledger once.
@Suite struct LedgerRefreshTests {
    let week = LedgerRefresh(interval: .seconds(7 * 86_400))
    let start = Date(timeIntervalSince1970: 1_790_000_000)

    @Test func instantsAnIntervalApartAreAlwaysInDifferentWindows() {
        for account in (0..<200).map({ "account-\($0)" }) {
            for step in [0.0, 3_600, 86_400 * 3.5] {
                let first = start.addingTimeInterval(step)
                let window = week.window(accountId: account, at: first)
                #expect(window != nil)
                #expect(week.window(accountId: account, at: first.addingTimeInterval(7 * 86_400)) == window.map { $0 + 1 })
                // Less than an interval later: the same window or the next one, never one further.
                let almost = week.window(accountId: account, at: first.addingTimeInterval(7 * 86_400 - 0.001))!
                #expect(almost == window! || almost == window! + 1)
            }
        }
    }

    /// Each account's window starts at its own time: a night rewrites about a seventh of the
    /// accounts, never all of them at once.
    @Test func eachNightRefreshesAboutASeventhOfTheAccounts() {
        let accounts = (0..<7_000).map { "user-\($0)" }
        var refreshedOverTheWeek = Set<String>()
        for night in 1...7 {
            let tonight = start.addingTimeInterval(Double(night) * 86_400)
            let refreshed = accounts.filter {
                week.window(accountId: $0, at: tonight) != week.window(accountId: $0, at: tonight.addingTimeInterval(-86_400))
            }
            #expect((800...1_200).contains(refreshed.count), "night \(night): \(refreshed.count) of 7000")
            refreshedOverTheWeek.formUnion(refreshed)
        }
        #expect(refreshedOverTheWeek.count == accounts.count)
    }

    @Test func zeroMeansEveryRun() {
        #expect(LedgerRefresh(interval: .zero).window(accountId: "a", at: start) == nil)
        #expect(LedgerRefresh(interval: .milliseconds(1)).window(accountId: "a", at: start) != nil)
    }

    @Test func theDigestDependsOnItsVersionTheWindowAndEveryRow() {
        let transaction = Transaction(transactionId: "1", originalTransactionId: "1", productId: "pro", purchaseDate: start)
        let entry = LedgerEntry(accountId: "a", transaction: transaction, environment: .production, source: .verifyReceipt)
        let digest = LedgerEntry.digest([entry], refreshWindow: 5)
        // Equal across processes (what a later run compares with the stored one): shown end to end by
        // CommandLineContractTests.ledgerRefreshZeroHealsAnEditMadeOutsideTheJob, whose second run
        // skips the unchanged rows. Compared with itself in one process, it could not fail.
        #expect(LedgerEntry.digest([entry], refreshWindow: 6) != digest)
        var refunded = entry
        refunded.transaction.cancellationDate = start
        #expect(LedgerEntry.digest([refunded], refreshWindow: 5) != digest)
        #expect(LedgerEntry.digest([], refreshWindow: 5) != LedgerEntry.digest([], refreshWindow: 6))
        // A new version of the digest's meaning differs for the same rows: every ledger is rewritten once.
        #expect(LedgerEntry.digest([entry], refreshWindow: 5, version: LedgerEntry.digestVersion + 1) != digest)
        #expect(LedgerEntry.digest([entry], refreshWindow: 5, version: LedgerEntry.digestVersion) == digest)
    }
}
