import Foundation
import Jobs
import Postgres
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// A stored row is outside input too (issue 32): an app that keeps `expires_at = 'infinity'` for a
/// lifetime grant once made every run fail reading its page ("not a finite ISO timestamp").
@Suite struct StoredSpecialValueTests {
    @Test func anInfiniteStoredExpiryIsReadNotAnErrorThatStopsTheRun() async throws {
        try await RunWorld.with("stored-infinity") { world in
            try await world.catalog(["lifetime": .nonConsumable])
            try await world.addReceipt("lifer", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "1"]]]])
            try await world.addReceipt("other", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "2"]]]])
            try await world.connection.execute("""
                INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, state, entitled, expires_at, updated_at)
                VALUES ('lifer', 'lifetime', '1', 'active', true, 'infinity', now()),
                       ('other', 'old.pass', '7', 'expired', false, '-infinity', now())
                """)
            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed)
            #expect(summary.accountsVerified == 2)
            let entitlements = try await world.entitlements()
            #expect(entitlements["lifer/lifetime"]?.entitled == true)
            #expect(entitlements["other/lifetime"]?.entitled == true)
        }
    }
}
