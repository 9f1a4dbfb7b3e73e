import AppStore
import CommandLineValues
import CivilCalendar
import ArgumentParser
import Dispatch
import Foundation
import Jobs
import Logging
import Postgres
import Reconciliation
import Storage

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "The nightly run: re-verifies every account with a receipt that is due, and corrects its entitlements.",
        discussion: """
            Due: never verified, or not since --stale-after; deferred receipts once their next_attempt_at has \
            passed. Every receipt of a due account is verified, since entitlements come from all of them; an \
            account with any receipt that did not verify gets no correction. Writes the report (summary.json, \
            summary.md, corrections.csv, failures.csv) and prints a short summary.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var run: RunCommandOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "Receipts verified more recently than this are not due.")
    var staleAfter = TimeLength(RunOptions.defaultStaleAfter)

    @Option(help: ArgumentHelp(
        "Through the App Store Server API (--source server-api or both): every account is verified at least once in this long; each night takes the accounts notifications made due, then those at risk, then the ones verified longest ago.",
        valueName: "time"))
    var fullCycle = TimeLength(RollingSchedule().fullCycle)

    @Option(help: ArgumentHelp(
        "Through the App Store Server API: take only as many accounts as this much time holds at the API budget (e.g. 4h); the report says how many were left for the next night and when the full cycle completes. Without the key (and without --source) it is noted and every due account verified, so one schedule serves both. Default: every due account.",
        valueName: "time"))
    var window: TimeLength?

    func validate() throws {
        guard fullCycle.seconds >= 3600 else { throw ValidationError("--full-cycle must be at least 1h") }
        if let window, window.seconds < 1 { throw ValidationError("--window must be at least 1s") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            var options = try run.runOptions(kind: .nightly, selection: .due(staleAfter: staleAfter.duration))
            options.readsNotificationHistory = true
            if options.sources.asksServerAPI {
                options.rollingSchedule = RollingSchedule(fullCycle: fullCycle.duration, window: window?.duration)
            } else if let window, run.source == nil, !run.appStoreConnect.isPartlyConfigured {
                // The shipped schedules pass --window whether or not the key is configured: without
                // it, verifyReceipt has no budget to plan by, and every due account is verified.
                // Part of a key given (an issuer, a key id, but no key file) is a key meant: refused.
                logger.notice("run.window_not_used", metadata: [
                    "window": "\(window.defaultValueDescription)",
                    "why": "no App Store Connect key: verifyReceipt has no budget to plan by; every due account is verified",
                ])
            } else if window != nil {
                throw ConfigurationError(run.source == nil
                    ? "--window plans by the App Store Server API's budget, and the App Store Connect key is only partly configured: set APPSTORE_PRIVATE_KEY_FILE (or --appstore-private-key-file) too"
                    : "--window plans by the App Store Server API's budget: it needs --source server-api or both (and the App Store Connect key)")
            }
            try await executeRun(options, common: run, database: database, logger: logger)
        }
    }
}

struct BackfillCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backfill",
        abstract: "A manual run over a selection of accounts, due or not.",
        discussion: """
            Selections combine (an account must match all given): --account (repeatable), --receipt-id \
            (repeatable; selects that receipt's account), --since/--until (the receipt's updated_at, half-open), \
            --product (accounts with an entitlement or a transaction of it). --all takes every account.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var run: RunCommandOptions
    @OptionGroup var logging: LoggingOptions

    @Option(name: .customLong("account"), help: "An account id (repeatable).")
    var accounts: [String] = []

    @Option(name: .customLong("receipt-id"), help: "An iap.app_receipts id (repeatable).")
    var receiptIds: [Int64] = []

    @Option(help: "Receipts updated at or after this time (ISO 8601, e.g. 2026-11-01 or 2026-11-01T00:00:00Z).")
    var since: String?

    @Option(help: "Receipts updated before this time (ISO 8601).")
    var until: String?

    @Option(name: .customLong("product"), help: "A product id (repeatable).")
    var products: [String] = []

    @Flag(help: "Every account.")
    var all = false

    @Flag(help: "Process the stored server notifications, then verify just the accounts they made due.")
    var notificationsOnly = false

    @Flag(help: ArgumentHelp(
        "Release the quarantined notifications and accounts (each stopped the process three times in a row) and process them again; alone, as --notifications-only (the notifications, then the released accounts and those the notifications made due). Fix the cause first."))
    var retryQuarantined = false

    @Flag(help: ArgumentHelp(
        "Examine every rejected notification again (a V2 one a check of the app's configuration refused is examined again by itself once the configuration changes; this takes the rest too: a v1 one refused for the shared secret, a signature that failed); alone, as --notifications-only. A forged body is rejected again."))
    var retryRejected = false

    func validate() throws {
        let selects = all || !accounts.isEmpty || !receiptIds.isEmpty || since != nil || until != nil || !products.isEmpty
        if (retryQuarantined || retryRejected) && !selects { return }  // alone: the notifications, then the accounts they made due
        if notificationsOnly && (all || !accounts.isEmpty || !receiptIds.isEmpty || since != nil || until != nil || !products.isEmpty) {
            throw ValidationError("--notifications-only takes the accounts the notifications name: leave out the other selections")
        }
        if notificationsOnly { return }
        if all && (!accounts.isEmpty || !receiptIds.isEmpty || since != nil || until != nil || !products.isEmpty) {
            throw ValidationError("--all takes every account: leave out the other selections")
        }
        if !all && accounts.isEmpty && receiptIds.isEmpty && since == nil && until == nil && products.isEmpty {
            throw ValidationError("say which accounts: --account, --receipt-id, --since/--until, --product, or --all")
        }
        if let since, CommandLineTime.parse(since) == nil { throw ValidationError("--since: not an ISO 8601 date or time: \(since)") }
        if let until, CommandLineTime.parse(until) == nil { throw ValidationError("--until: not an ISO 8601 date or time: \(until)") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let notificationsAlone = notificationsOnly || ((retryQuarantined || retryRejected) && !all && accounts.isEmpty && receiptIds.isEmpty
                && since == nil && until == nil && products.isEmpty)
            let selection: AccountSelection.Kind = notificationsAlone ? .reverifyRequested : .backfill(
                accounts: accounts, receiptIds: receiptIds, since: since.flatMap(CommandLineTime.parse), until: until.flatMap(CommandLineTime.parse),
                products: products, all: all)
            var options = try run.runOptions(kind: .backfill, selection: selection)
            options.readsNotificationHistory = notificationsAlone
            options.retriesQuarantined = retryQuarantined
            options.retriesRejected = retryRejected
            try await executeRun(options, common: run, database: database, logger: logger)
        }
    }
}

/// `2026-11-01`, `2026-11-01T10:00:00Z`, or with a fraction or offset; dates are UTC midnight.

/// Raises the soft limit on open files to the hard one: a run at --concurrency 1000 holds a
/// socket per request in flight, past the common default of 1024.
func raiseOpenFileLimit() {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
    limit.rlim_cur = limit.rlim_max
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}

/// No core dump of this process: it holds the shared secret, the database password and the
/// App Store Connect key in memory, and a dump would write them to disk. Done first thing in `main`.
func disableCoreDumps() {
    var none = rlimit(rlim_cur: 0, rlim_max: 0)
    _ = setrlimit(Int32(RLIMIT_CORE.rawValue), &none)
}

/// Connects, runs, reports, and maps the ending to its exit status (docs/operating.md, "Exit status").
func executeRun(_ options: RunOptions, common: RunCommandOptions, database: DatabaseOptions, logger: Logger) async throws {
    // From here on SIGTERM and SIGINT ask the run to stop; before, they end the process, which is
    // safe: nothing was written yet.
    let stopSignals = StopSignals.stream()
    raiseOpenFileLimit()
    // Every setting is checked before anything connects, and every one missing is named at once.
    var settings = ConfigurationCheck()
    let connectionString = settings.check { try database.connectionString() }
    let secret = settings.check { try common.traffic.sharedSecret() }
    let endpoints = settings.check { try common.traffic.endpoints() }
    let serverAPIConfiguration = options.sources.asksServerAPI
        ? settings.check {
            (try common.appStoreConnect.credentials(bundleIds: common.app.configuredBundleIds(), appAppleId: common.app.configuredAppAppleId()),
             try common.appStoreConnect.endpoints())
        }
        : nil
    try settings.done()
    guard let connectionString, let secret, let endpoints else { throw ConfigurationError("the configuration is incomplete") }
    let sessions = RunSessions(
        lock: try await PostgresConnection.connect(connectionString),
        reader: try await PostgresConnection.connect(connectionString),
        writer: try await PostgresConnection.connect(connectionString))
    if let first = try await sessions.reader.journalFirstRecordingUnfinished() {
        // The run records its own rows' events; the rest wait for migrate, and exports refuse until then.
        logger.warning("journal.first_recording_unfinished", metadata: [
            "ledger.rows": .stringConvertible(first.done), "hint": "run 'receipt-reconciler migrate' to finish the finance journal's first recording",
        ])
    }
    // One gateway to Apple: both clients share its connections, limits, stop switch and budget.
    let gateway = AppleGateway(
        concurrency: options.concurrency, requestsPerSecond: options.requestsPerSecond, budget: options.apiBudget(), proxy: common.proxy.proxy())
    defer { gateway.shutdown() }
    let client = VerifyReceiptClient(endpoints: endpoints, sharedSecret: secret, policy: options.policy, gateway: gateway, logger: logger)
    let serverAPI = serverAPIConfiguration.map { credentials, apiEndpoints in
        ServerAPIClient(
            endpoints: apiEndpoints, token: ServerAPIToken(credentials: credentials), gateway: gateway, policy: options.policy, logger: logger)
    }
    // A dry run prints the plan before anything is asked of Apple.
    var printPlan: (@Sendable (SchedulePlan) -> Void)?
    if options.isDryRun {
        printPlan = { plan in FileHandle.standardOutput.write(Data((plan.lines.joined(separator: "\n") + "\n").utf8)) }
    }
    let run = ReconciliationRun(
        options: options, sessions: sessions, client: client, serverAPI: serverAPI, sharedSecret: secret, logger: logger,
        planned: printPlan,
        firstNightLosses: { losses in FileHandle.standardOutput.write(Data((losses.lines.joined(separator: "\n") + "\n").utf8)) })

    let result: (summary: RunSummary, ending: ReconciliationRun.Ending)
    do {
        result = try await withThrowingTaskGroup(of: (summary: RunSummary, ending: ReconciliationRun.Ending)?.self) { group in
            // SIGTERM and SIGINT: stop taking accounts, finish what is in flight, commit, end
            // `interrupted`. The watcher is a child of the run's group, so it ends with the run.
            group.addTask {
                for await received in stopSignals {
                    logger.notice("run.stopping", metadata: ["run.signal": "\(received == SIGTERM ? "SIGTERM" : "SIGINT")"])
                    run.requestStop()
                }
                return nil
            }
            group.addTask { try await run.run() }
            for try await finished in group {
                guard let finished else { continue }  // the watcher ended: the signals' stream was finished
                group.cancelAll()  // the watcher, waiting for a signal that will not come now
                return finished
            }
            throw CancellationError()  // only if the run's own task was cancelled before it returned
        }
    } catch let refused as FirstNightRefused {
        logger.error("run.first_night_refused", metadata: ["error": "\(refused)"])
        throw ExitStatus.configuration
    } catch is RunLocked {
        logger.error("run.locked", metadata: ["error": "another run holds the lock on this database; try again when it ends"])
        throw ExitStatus.locked
    }
    FileHandle.standardOutput.write(Data(RunReport.short(result.summary).utf8))
    switch result.ending {
    case .completed: return
    case .interrupted: throw ExitStatus.failed
    case .aborted: throw ExitStatus.aborted
    case .sharedSecretRejected:
        logger.error("apple.shared_secret_rejected", metadata: ["error": "\(result.summary.error ?? "")"])
        throw ExitStatus.configuration
    }
}

/// Checks settings one after another and keeps every problem, so that one error names them all:
/// an operator mends the whole configuration at once, not one variable a night.
struct ConfigurationCheck {
    private(set) var problems: [String] = []

    mutating func check<Value>(_ body: () throws -> Value) -> Value? {
        do {
            return try body()
        } catch let error as ConfigurationError {
            problems.append(error.description)
        } catch {
            problems.append("\(error)")
        }
        return nil
    }

    /// Throws one error naming every problem found, if any.
    func done() throws {
        guard !problems.isEmpty else { return }
        throw ConfigurationError(problems.count == 1 ? problems[0] : problems.enumerated().map { "(\($0 + 1)) \($1)" }.joined(separator: "; "))
    }
}
