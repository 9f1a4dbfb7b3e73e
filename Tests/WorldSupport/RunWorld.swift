import AppStore
import AppStoreModels
import Foundation
import Throttling
import Jobs
import Logging
import Postgres
import Reconciliation
import SchemaMigrations
import Storage
import TestSupport

/// A migrated database of its own, the simulator, and helpers to build accounts with known truth.
final class RunWorld: @unchecked Sendable {
    // Set up once in `make`, then only read.
    let database: TestDatabase
    let connection: PostgresConnection
    let simulator: SimulatorProcess
    let secret = "world-secret"
    let now: Date
    let reportRoot = FileManager.default.temporaryDirectory.appending(path: "rr-reports-\(UUID().uuidString)")

    private init(database: TestDatabase, connection: PostgresConnection, simulator: SimulatorProcess, now: Date) {
        self.now = now
        self.database = database
        self.connection = connection
        self.simulator = simulator
    }

    /// Builds a world, hands it to `body`, and tears it down whatever `body` did.
    static func with<Result>(
        _ label: String, now: Date = Date(), scenario: [String: Any] = [:], _ body: (RunWorld) async throws -> Result
    ) async throws -> Result {
        let world = try await make(label, scenario: scenario, now: now)
        do {
            let result = try await body(world)
            await world.tearDown()
            return result
        } catch {
            await world.tearDown()
            throw error
        }
    }

    static func make(_ label: String, scenario: [String: Any] = [:], now: Date = Date()) async throws -> RunWorld {
        let database = try await TestDatabase.create(label)
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        var scenario = scenario
        scenario["shared_secret"] = "world-secret"
        return RunWorld(database: database, connection: connection, simulator: try SimulatorProcess(scenario: scenario), now: now)
    }

    func tearDown() async {
        simulator.stop()
        await connection.close()
        try? await database.drop()
        try? FileManager.default.removeItem(at: reportRoot)
    }

    var dayMs: Int64 { 86_400_000 }
    var nowMs: Int64 { Int64(now.timeIntervalSince1970 * 1000) }

    /// A subscription spec for the simulator whose last period ends `endDays` from now.
    func subscription(original: String, renewals: Int = 3, endDays: Double, product: String = "pro.monthly",
                      extra: [String: Any] = [:]) -> [String: Any] {
        let end = nowMs + Int64(endDays * 86_400_000)
        var spec: [String: Any] = ["product_id": product, "original_transaction_id": original, "renewals": renewals,
                                   "start_ms": end - Int64(renewals) * 30 * dayMs, "period_ms": 30 * dayMs]
        spec.merge(extra) { $1 }
        return spec
    }

    func expiry(endDays: Double) -> Date {
        Date(timeIntervalSince1970: Double(nowMs + Int64(endDays * 86_400_000)) / 1000)
    }

    @discardableResult
    func addReceipt(_ account: String, _ blob: String) async throws -> Int64 {
        try await connection.query("""
            INSERT INTO iap.app_receipts (account_id, bundle_id, latest_receipt) VALUES (\(account), 'com.example.app', \(blob)) RETURNING id
            """)[0].decode("id")
    }

    func addReceipt(_ account: String, spec: [String: Any]) async throws {
        try await addReceipt(account, syntheticReceipt(spec))
    }

    /// Catalog rows (`iap.products`): a product neither the catalog nor Apple's signed data types
    /// is left as stored (docs/guarantees.md, "Entitlement rules"), so a world that expects a
    /// one-time purchase granted says what it is, as an adopter does.
    func catalog(_ products: [String: ProductType]) async throws {
        for (product, type) in products.sorted(by: { $0.key < $1.key }) {
            try await connection.execute("""
                INSERT INTO iap.products (product_id, type) VALUES (\(product), \(type.rawValue)) ON CONFLICT (product_id) DO NOTHING
                """)
        }
    }

    /// A night of `total` accounts (`n000`, `n001`, ...) stored active: Apple refunds every account
    /// `refunded` says and answers HTTP 503, always, for every account `unanswered` says.
    func populateNight(total: Int, refunded: (Int) -> Bool, unanswered: (Int) -> Bool = { _ in false }) async throws {
        for index in 0..<total {
            let account = String(format: "n%03d", index)
            let original = "\(20_000 + index)"
            let extra: [String: Any] = refunded(index) ? ["cancel": ["at_ms": nowMs - dayMs, "reason": 0]] : [:]
            var spec: [String: Any] = ["generate": ["subscriptions": [subscription(original: original, renewals: 1, endDays: 10, extra: extra)]]]
            if unanswered(index) {
                spec["faults"] = [["http": 503]]
                spec["repeat_faults"] = true
            }
            try await addReceipt(account, spec: spec)
            try await store(Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: original,
                                        state: .active, expiresAt: expiry(endDays: 10)))
        }
    }

    /// The app's own row, imported: the import is recorded too (`iap.adoption`, as docs/adoption.md's
    /// import does), unless `imported` is false (a row the app server wrote, with nothing imported).
    func store(_ entitlement: Entitlement, imported: Bool = true) async throws {
        if imported {
            try await connection.execute("""
                INSERT INTO iap.adoption (access_imported_at) VALUES (now())
                ON CONFLICT (id) DO UPDATE SET access_imported_at = COALESCE(iap.adoption.access_imported_at, now())
                """)
        }
        try await connection.execute("""
            INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, latest_transaction_id, state, entitled,
                expires_at, auto_renew, auto_renew_product_id, environment, ownership_type, refunded_at, updated_at)
            VALUES (\(entitlement.accountId), \(entitlement.productId), \(entitlement.originalTransactionId),
                    \(entitlement.latestTransactionId), \(entitlement.state.rawValue), \(entitlement.entitled), \(entitlement.expiresAt),
                    \(entitlement.autoRenew), \(entitlement.autoRenewProductId), \(entitlement.environment),
                    \(entitlement.ownershipType), \(entitlement.refundedAt), now())
            """)
    }

    func options(kind: RunKind = .nightly, selection: AccountSelection.Kind = .due(staleAfter: .seconds(20 * 3600)),
                 dryRun: Bool = false) -> RunOptions {
        var options = RunOptions(kind: kind, selection: AccountSelection(kind: selection))
        options.isDryRun = dryRun
        options.concurrency = 16
        options.policy = VerificationPolicy(maximumAttempts: 2, backoff: Backoff(base: .milliseconds(5), maximum: .milliseconds(10)))
        options.reportDirectory = reportRoot.appending(path: UUID().uuidString)
        options.pageSize = 7  // several pages even in small worlds
        options.batchSize = 5
        // The worlds start with no entitlement stored: a first night the job refuses without this
        // (FirstNightGuardTests test the refusal).
        options.acceptsFirstNight = true
        return options
    }

    /// Runs against the world's simulator, or `apple` (another script of answers for the same receipts).
    /// `apiBudget`: the Server API keeps to `options.apiBudget()`, as the command does (off by
    /// default: Apple's sandbox quota would slow every other test).
    /// `stormGate`: the gateway's (a test where most of Apple's answers fail on purpose passes one
    /// that never pauses, so it is not slowed by the pauses that protect a real night).
    func run(_ options: RunOptions, apple: SimulatorProcess? = nil, apiBudget: Bool = false, stormGate: StormGate = StormGate()) async throws
        -> (summary: RunSummary, ending: ReconciliationRun.Ending)
    {
        let sessions = RunSessions(
            lock: try await database.connect(), reader: try await database.connect(), writer: try await database.connect())
        let simulator = apple ?? self.simulator
        let client = VerifyReceiptClient(
            endpoints: .init(production: simulator.productionURL, sandbox: simulator.sandboxURL), sharedSecret: secret,
            policy: options.policy,
            gateway: AppleGateway(concurrency: options.concurrency, stormGate: stormGate, budget: apiBudget ? options.apiBudget() : nil),
            logger: .quiet)
        defer { client.gateway.shutdown() }
        // The Server API, when the options ask for it: the simulator's, with Apple's test key.
        var serverAPI: ServerAPIClient?
        if options.sources.asksServerAPI {
            let pem = String(decoding: try Fixtures.bytes("asapi/apple-lib/swift/certs/testSigningKey.p8"), as: UTF8.self)
            let credentials = try ServerAPICredentials(issuerId: "issuer", keyId: "KEY", bundleId: "com.example.app", privateKeyPEM: pem)
            serverAPI = ServerAPIClient(
                endpoints: .init(production: simulator.apiURL, sandbox: simulator.sandboxAPIURL), token: ServerAPIToken(credentials: credentials),
                gateway: client.gateway, policy: options.policy, logger: .quiet)
        }
        let run = ReconciliationRun(options: options, sessions: sessions, client: client, serverAPI: serverAPI, sharedSecret: secret,
                                    logger: .quiet)
        let result = try await run.run()
        await sessions.close()
        return result
    }

    /// The report directory of the latest run (each run of `options()` gets one of its own).
    func lastReportDirectory() throws -> URL? {
        let directories = try FileManager.default.contentsOfDirectory(
            at: reportRoot, includingPropertiesForKeys: [.contentModificationDateKey])
        return try directories.max {
            try $0.resourceValues(forKeys: [.contentModificationDateKey]).contentModificationDate!
                < $1.resourceValues(forKeys: [.contentModificationDateKey]).contentModificationDate!
        }
    }

    func entitlements() async throws -> [String: Entitlement] {
        var result: [String: Entitlement] = [:]
        for row in try await connection.query("SELECT * FROM iap.entitlements") {
            let account: String = try row.decode("account_id")
            let product: String = try row.decode("product_id")
            let state = EntitlementState(rawValue: try row.decode("state"))!
            result["\(account)/\(product)"] = Entitlement(
                accountId: account, productId: product, originalTransactionId: try row.decode("original_transaction_id"),
                latestTransactionId: try row.decode("latest_transaction_id"), state: state, expiresAt: try row.decode("expires_at"),
                gracePeriodExpiresAt: try row.decode("grace_period_expires_at"), autoRenew: try row.decode("auto_renew"),
                autoRenewProductId: try row.decode("auto_renew_product_id"), environment: try row.decode("environment"),
                ownershipType: try row.decode("ownership_type"), refundedAt: try row.decode("refunded_at"))
        }
        return result
    }

    /// Correction kinds by account for one run, sorted.
    func corrections(run: Int64) async throws -> [String: [String]] {
        var result: [String: [String]] = [:]
        for row in try await connection.query("SELECT account_id, kind FROM iap.corrections WHERE run_id = \(run) ORDER BY kind") {
            result[try row.decode("account_id"), default: []].append(try row.decode("kind"))
        }
        return result
    }

    /// A correction planned by run `runId`, as a run plans one: the row it expects (`before`, nil
    /// where none existed) and the row it would write, as JSON.
    func plan(runId: Int64, _ kind: Correction.Kind, before: Entitlement?, after: Entitlement) async throws {
        try await connection.execute("""
            INSERT INTO iap.corrections (run_id, account_id, product_id, kind, reason, before, after, status)
            VALUES (\(runId), \(after.accountId), \(after.productId), \(kind.rawValue), 'test',
                    \(try before.map { PostgresJSON(text: try EntitlementJSON.encode($0)!) }), \(PostgresJSON(text: try EntitlementJSON.encode(after)!)),
                    'planned')
            """)
    }

    func count(_ sql: String) async throws -> Int {
        try await connection.query(PostgresQuery(unsafeSQL: sql))[0].decode(at: 0)
    }

    /// True once a backend of this world's database waits on a lock.
    func someoneWaitsOnALock() async throws -> Bool {
        try await count("""
            SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
            """) > 0
    }
}
