import AppStoreModels
import CivilCalendar
import Foundation

/// The report's words and numbers, rendered from a run's summary (pure).
public enum RunReport {
    /// What verifyReceipt polling cannot see, said in every report rather than guessed.
    public static let blindSpots = """
        What polling cannot see: a refund of a consumable (or of a non-renewing purchase) that the app \
        already finished is gone from every verifyReceipt answer, so no run can find it; only App Store \
        Server Notifications (REFUND) report it. Revocations of family sharing appear only once Apple's \
        answer for that member's receipt changes.
        """

    /// `summary.json`: every count of the summary, with the accounts by outcome and the blind
    /// spots beside them, in one encoding pass.
    public static func json(_ summary: RunSummary) throws -> String {
        try ProgramJSON.pretty(SummaryDocument(summary: summary))
    }

    /// The summary's own keys, and two more.
    private struct SummaryDocument: Encodable {
        var summary: RunSummary

        enum Keys: String, CodingKey {
            case outcomes
            case pollingBlindSpots
        }

        func encode(to encoder: any Encoder) throws {
            try summary.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(Dictionary(uniqueKeysWithValues: RunReport.accountsByOutcome(summary)), forKey: .outcomes)
            try container.encode(RunReport.blindSpots, forKey: .pollingBlindSpots)
        }
    }

    /// The short summary printed on stdout at the end of a run.
    public static func short(_ summary: RunSummary) -> String {
        let byKind: [String] = Correction.Kind.allCases.compactMap { kind in
            summary.corrections[kind.rawValue].map { "\($0) \(kind.rawValue)" }
        }
        let corrections = byKind.isEmpty ? "none" : byKind.joined(separator: ", ")
        let applied = summary.isDryRun ? " (planned, not applied)" : ", \(summary.correctionsApplied) applied"
        let title = "Run \(summary.runId) (\(summary.kind.rawValue)\(summary.isDryRun ? ", dry run" : "")): \(summary.status.rawValue)"
        let accounts = "  accounts: \(summary.accountsProcessed) processed, \(summary.accountsVerified) verified "
            + "(\(summary.accountsCorrected) corrected, \(summary.accountsUnchanged) unchanged), "
            + "\(summary.accountsDeferred) deferred, \(summary.accountsFailed) failed, "
            + "\(summary.accountsInvalidReceipt) invalid receipt"
        var lines: [String] = [title, accounts, "  corrections: " + corrections + applied, "  Apple requests: \(summary.appleRequests)"]
        if summary.sandboxGrants > 0 { lines.append("  sandbox grants: \(summary.sandboxGrants)") }
        if summary.heldRevokes > 0 { lines.append("  revokes held for the expiry lag: \(summary.heldRevokes)") }
        if summary.correctionsSuperseded > 0 {
            lines.append("  superseded (entitlement changed meanwhile, or a plan taken over and not applied): \(summary.correctionsSuperseded)")
        }
        if summary.correctionsTakenOver > 0 {
            lines.append("  taken over from interrupted runs: \(summary.correctionsTakenOver) (their accounts verified again; only fresh plans apply)")
        }
        if let limit = summary.revokeRatio, limit.siblingShards != nil {
            lines.append("  safety limit: \(limit.revokedAccounts) of \(limit.accounts) verified accounts with this night's other shards (\(limit.nightAccounts) for the minimum)")
        }
        let notifications = summary.notifications.values.reduce(into: [NotificationOutcome: Int]()) { totals, outcomes in
            for (outcome, count) in outcomes { totals[outcome, default: 0] += count }
        }
        if !notifications.isEmpty {
            lines.append("  notifications: " + NotificationOutcome.allCases
                .compactMap { outcome in notifications[outcome].map { "\($0) \(outcome.rawValue)" } }.joined(separator: ", "))
        }
        if let quarantined = summary.notificationsQuarantined, !quarantined.isEmpty {
            lines.append("  quarantined notifications: \(summary.notificationsQuarantinedCount ?? quarantined.count) "
                + "(each stopped the process 3 times; set aside until `backfill --retry-quarantined`; see the report)")
        }
        if let failing = summary.accountsEscalated, !failing.isEmpty {
            lines.append("  failing run after run: \(summary.accountsEscalatedCount ?? failing.count) receipt(s) (see the report):")
            lines += failing.prefix(20).map { "    " + DisplayText.escaped($0) }
        }
        if let again = summary.notificationsReexamined, again > 0 {
            lines.append("  rejected notifications examined again: \(again) (the app's configuration changed, or --retry-rejected)")
        }
        if let held = summary.notificationsHeld, held > 0 {
            lines.append("  notifications held by another process: \(held) (not processed: the next run takes them)")
        }
        if let quarantined = summary.accountsQuarantined, !quarantined.isEmpty {
            lines.append("  quarantined accounts: \(quarantined.count) (each stopped the process 3 times; failed unread; see the report)")
        }
        if !summary.consumptionRequests.isEmpty { lines.append("  consumption requests: \(summary.consumptionRequests.count)") }
        if let answers = summary.consumptionAnswers, !answers.isEmpty {
            let counted = answers.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            lines.append("  refund questions of the last 24 hours: \(counted); oldest unanswered: "
                + (summary.consumptionOldestUnansweredSeconds.map { $0 > 0 ? "\($0 / 60) min" : "none" } ?? "none"))
        }
        if !summary.bundleMismatches.isEmpty { lines.append("  receipts of another app: \(summary.bundleMismatches.count) (see the report)") }
        if let untyped = summary.productsLeftAsStored, !untyped.isEmpty {
            lines.append("  products left as stored (no type known: add them to iap.products): \(untyped.count) (see the report)")
        }
        if let skipped = summary.accountsNotCrossChecked, skipped > 0 {
            lines.append("  not cross-checked (the other source failed): \(skipped)")
        }
        if let plan = summary.schedule {
            lines.append("  plan: \(plan.totalScheduled) of \(plan.totalDue) due accounts (notified \(plan.scheduled[.notified] ?? 0), "
                + "at risk \(plan.scheduled[.atRisk] ?? 0), full cycle \(plan.scheduled[.cycle] ?? 0))"
                + (plan.leftForNextNight > 0 ? "; \(plan.leftForNextNight) left for the next night"
                    + (plan.fullCycleCompleteBy.map { ", the full cycle completes by \(Timestamp.day($0))" } ?? "") : ""))
        }
        if let reads = summary.notificationHistory, !reads.isEmpty {
            lines.append("  notification history: " + reads.map { read in
                "\(read.environment) \(read.received) listed, \(read.stored) new"
                    + (read.complete ? "" : " (incomplete: the next run goes on from \(read.readUntil.map { Timestamp.format($0) } ?? "the start"))")
            }.joined(separator: "; "))
            for read in reads where read.unreachableFrom != nil {
                lines.append("  notification history NOT READABLE: " + read.unreachableLine)
            }
        }
        if let api = summary.apiRequests, !api.isEmpty {
            lines.append("  App Store Server API: " + api.sorted { $0.key < $1.key }.map { key, usage in
                "\(key) \(usage.requests) (\(usage.throttled) throttled, \(percent(usage.budgetUsed)) of the budget)"
            }.joined(separator: ", "))
        }
        if let disagreements = summary.disagreements, !disagreements.isEmpty {
            lines.append("  source disagreements: \(disagreements.values.reduce(0, +)) (see disagreements.csv)")
        }
        if let error = summary.error { lines.append("  note: \(DisplayText.escaped(error))") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `summary.md`: the run for people. Long on purpose: its sections in the order a reader
    /// looks for them (outcome, accounts, corrections, Apple, notifications, what polling cannot
    /// see), each a few lines; split, the order of the report would live in several places.
    public static func markdown(_ summary: RunSummary) -> String {
        func row(_ name: String, _ value: Int) -> String { "| \(name) | \(value) |" }
        // Lines that carry account ids, reasons and types from the database or Apple.
        func list(_ items: [String]) -> String { items.map { "- \(DisplayText.escaped($0))" }.joined(separator: "\n") + "\n" }
        var text = """
            # Reconciliation run \(summary.runId)

            - Kind: \(summary.kind.rawValue)\(summary.isDryRun ? " (dry run: nothing applied)" : "")
            - Status: **\(summary.status.rawValue)**
            - Started: \(Timestamp.format(summary.startedAt))
            - Finished: \(summary.finishedAt.map { Timestamp.format($0) } ?? "-")
            - Shard: \(DisplayText.escaped(summary.shard ?? "all accounts"))

            ## Accounts by outcome

            | outcome | accounts |
            |---|---|
            \(accountOutcomeRows(summary).map { row($0.outcome, $0.accounts) }.joined(separator: "\n"))
            | **processed** | **\(summary.accountsProcessed)** |

            ## Corrections by kind

            | kind | corrections |
            |---|---|

            """
        for kind in Correction.Kind.allCases {
            text += row(kind.rawValue, summary.corrections[kind.rawValue] ?? 0) + "\n"
        }
        text += "| **planned** | **\(summary.totalCorrections)** |\n"
        text += """

            - Applied: \(summary.correctionsApplied); superseded (the entitlement changed after planning, or a plan taken over and not applied): \(summary.correctionsSuperseded)
            - Sandbox grants: \(summary.sandboxGrants)
            - Revokes held for the expiry lag: \(summary.heldRevokes)
            - Taken over from interrupted runs: \(summary.correctionsTakenOver)
            - Apple requests: \(summary.appleRequests); pauses for a storm of transient failures: \(summary.appleStormPauses)
            - Fresher receipts from Apple stored: \(summary.latestReceiptsStored); placeholders ignored: \(summary.latestReceiptsIgnored)

            """
        if let plan = summary.schedule {
            text += "\n## Tonight's plan (a rolling run within Apple's budget)\n\n```\n" + plan.lines.joined(separator: "\n") + "\n```\n\n"
                + "Accounts are taken in this order: those a notification made due, those at risk (an expiry within the expiry lag "
                + "and a day, grace period, billing retry, a refund the entitlement does not show yet), then those verified longest ago, "
                + "so that each is verified at least once per full cycle.\n"
        }
        if let reads = summary.notificationHistory, !reads.isEmpty {
            text += "\n## Notification history (Get Notification History, the delta feed)\n\n"
                + "| environment | from | to | pages | listed | new | read until | complete |\n|---|---|---|---|---|---|---|---|\n"
            for read in reads {
                text += "| \(read.environment) | \(Timestamp.format(read.from)) | \(Timestamp.format(read.to)) | \(read.pages) | \(read.received) | "
                    + "\(read.stored) | \(read.readUntil.map { Timestamp.format($0) } ?? "none") | "
                    + "\(read.complete ? "yes" : "no: " + DisplayText.escaped(read.error ?? "")) |\n"
            }
            for read in reads where read.unreachableFrom != nil {
                text += "\n**Not readable:** " + read.unreachableLine + "\n"
            }
            text += "\nNew ones are notifications nobody had stored (the app server missed them, or they came since the last read). "
                + "The window is read a day at a time: the watermark (read until) moves at the end of each day stored whole, "
                + "and the next run goes on from where this one stopped, inside a day at Apple's paginationToken.\n"
        }
        if let api = summary.apiRequests, !api.isEmpty {
            text += "\n## App Store Server API requests, against the job's budget\n\n"
                + "| endpoint | requests | 429 (throttled) | budget (requests/s) | budget used |\n|---|---|---|---|---|\n"
            for (key, usage) in api.sorted(by: { $0.key < $1.key }) {
                text += "| \(key) | \(usage.requests) | \(usage.throttled) | \(String(format: "%.2f", usage.budgetPerSecond)) | \(percent(usage.budgetUsed)) |\n"
            }
            text += "\nThe budget is `--api-budget-share` of Apple's quota per endpoint, divided among `--shard` workers; "
                + "a 429 pauses its endpoint for every request until Apple's Retry-After.\n"
        }
        if !summary.appleStatuses.isEmpty {
            text += "\n## Apple statuses in final answers\n\n| status | receipts |\n|---|---|\n"
            for (status, count) in summary.appleStatuses.sorted(by: { $0.key < $1.key }) { text += "| \(status) | \(count) |\n" }
        }
        if !summary.notifications.isEmpty {
            text += "\n## Server notifications\n\n| type | " + NotificationOutcome.allCases.map(\.rawValue).joined(separator: " | ")
                + " |\n|---|" + String(repeating: "---|", count: NotificationOutcome.allCases.count) + "\n"
            for (type, outcomes) in summary.notifications.sorted(by: { $0.key < $1.key }) {
                let cells = NotificationOutcome.allCases.map { String(outcomes[$0] ?? 0) }
                text += "| \(DisplayText.escaped(type)) | " + cells.joined(separator: " | ") + " |\n"
            }
            text += "\nUnmatched notifications are tried again by later runs until they are a week old (`--notification-max-age`).\n"
            text += "V2 notifications are counted as `v2 TYPE` (`v2 TYPE/SUBTYPE`); every signed part of one is verified before it is used.\n"
        }
        /// A listed section: its title, the items, then what they mean.
        func section(_ title: String, _ items: [String]?, _ note: (Int) -> String) -> String {
            guard let items, !items.isEmpty else { return "" }
            return "\n## \(title)\n\n" + list(items) + "\n" + note(items.count) + "\n"
        }
        text += section("Quarantined notifications (set aside, not processed)", summary.notificationsQuarantined) { listed in
            "\(summary.notificationsQuarantinedCount ?? listed) quarantined now. Each stopped the process every time "
                + "it was processed. Runs skip them, and list them here every night until "
                + "`receipt-reconciler backfill --retry-quarantined` releases them once the cause is fixed: released, each is processed "
                + "after the others and quarantined again at its first start that does not finish."
        }
        text += section("Receipts failing run after run", summary.accountsEscalated) { listed in
            "\(summary.accountsEscalatedCount ?? listed) receipt(s) failed `--escalate-after` runs in a row or more. "
                + "Their accounts keep the entitlements they had (nothing is granted or revoked on a failure): a person decides. "
                + "A receipt Apple keeps calling malformed (21002) is set aside for 30 days; `backfill --account` asks again at once."
        }
        text += section("Quarantined accounts (set aside, not verified)", summary.accountsQuarantined) { _ in
            "Each stopped the process three times in a row while it was verified alone. Their receipts fail unread "
                + "(nothing granted, nothing revoked) until `receipt-reconciler backfill --retry-quarantined` releases them "
                + "once the cause is fixed."
        }
        if let rejected = summary.notificationsRejected, !rejected.isEmpty {
            text += "\n## Rejected notifications (nothing of them was used)\n\n"
            text += list(rejected)
        }
        if let disagreements = summary.disagreements, !disagreements.isEmpty {
            text += "\n## Where verifyReceipt and the App Store Server API disagree\n\n| kind | count |\n|---|---|\n"
            for kind in Disagreement.Kind.allCases { if let count = disagreements[kind] { text += "| \(kind.rawValue) | \(count) |\n" } }
            text += "\nThe first ones (all of them are in `disagreements.csv`):\n\n"
            text += list(summary.disagreementExamples ?? [])
        }
        if !summary.bundleMismatches.isEmpty {
            text += "\n## Receipts of another app (a fraud signal; Apple still decides)\n\n"
            text += list(summary.bundleMismatches)
        }
        if let untyped = summary.productsLeftAsStored, !untyped.isEmpty {
            text += "\n## Products left as stored (the catalog and Apple's signed data say nothing of their type; add them to iap.products)\n\n"
            text += list(untyped)
        }
        if summary.receiptsNotDecodedLocally > 0 {
            text += "\n\(summary.receiptsNotDecodedLocally) receipt(s) could not be decoded locally (not PKCS#7); they were verified with Apple all the same.\n"
        }
        if !summary.consumptionRequests.isEmpty {
            text += "\n## CONSUMPTION_REQUESTs (answered by answer-consumption-requests within 12 hours: see iap.consumption_answers)\n\n"
            text += list(summary.consumptionRequests)
        }
        if let error = summary.error { text += "\n## Note\n\n\(DisplayText.escaped(error))\n" }
        text += "\n## What polling cannot see\n\n\(blindSpots)\n"
        return text
    }

    /// The run as Prometheus text (for node_exporter's textfile collector). The last success
    /// time is carried over from `previous` (the file as it was) when this run did not complete.
    public static func metrics(_ summary: RunSummary, previous: String?) -> String {
        let kind = "kind=\"\(summary.kind.rawValue)\""
        let finished = (summary.finishedAt ?? Date()).timeIntervalSince1970
        var lastSuccess: String?
        if summary.status == .completed {
            lastSuccess = String(format: "%.3f", finished)
        } else if let previous {
            lastSuccess = previous.split(separator: "\n").first { $0.hasPrefix("receipt_reconciler_last_success_timestamp_seconds{\(kind)}") }
                .flatMap { $0.split(separator: " ").last.map(String.init) }
        }
        var lines = [
            "# HELP receipt_reconciler_last_run_timestamp_seconds When the last run finished.",
            "# TYPE receipt_reconciler_last_run_timestamp_seconds gauge",
            "receipt_reconciler_last_run_timestamp_seconds{\(kind)} \(String(format: "%.3f", finished))",
            "# HELP receipt_reconciler_last_success_timestamp_seconds When the last completed run finished.",
            "# TYPE receipt_reconciler_last_success_timestamp_seconds gauge",
        ]
        if let lastSuccess { lines.append("receipt_reconciler_last_success_timestamp_seconds{\(kind)} \(lastSuccess)") }
        lines += [
            "# HELP receipt_reconciler_last_run_status The last run's status (1 for the status it ended in).",
            "# TYPE receipt_reconciler_last_run_status gauge",
        ]
        for status in RunStatus.allCases where status != .running {
            lines.append("receipt_reconciler_last_run_status{\(kind),status=\"\(status.rawValue)\"} \(summary.status == status ? 1 : 0)")
        }
        lines += [
            "# HELP receipt_reconciler_last_run_duration_seconds How long the last run took.",
            "# TYPE receipt_reconciler_last_run_duration_seconds gauge",
            "receipt_reconciler_last_run_duration_seconds{\(kind)} \(String(format: "%.3f", finished - summary.startedAt.timeIntervalSince1970))",
            "# HELP receipt_reconciler_last_run_accounts Accounts of the last run by outcome.",
            "# TYPE receipt_reconciler_last_run_accounts gauge",
        ]
        for (outcome, count) in accountsByOutcome(summary) {
            lines.append("receipt_reconciler_last_run_accounts{\(kind),outcome=\"\(outcome)\"} \(count)")
        }
        lines += [
            "# HELP receipt_reconciler_last_run_corrections Corrections of the last run by kind.",
            "# TYPE receipt_reconciler_last_run_corrections gauge",
        ]
        for kind in Correction.Kind.allCases {
            lines.append("receipt_reconciler_last_run_corrections{kind=\"\(summary.kind.rawValue)\",correction=\"\(kind.rawValue)\"} \(summary.corrections[kind.rawValue] ?? 0)")
        }
        lines += [
            "# HELP receipt_reconciler_last_run_quarantined Rows set aside because processing them stopped the process three times in a row: notifications quarantined at the last run's end (until released), accounts it found quarantined (failed unread).",
            "# TYPE receipt_reconciler_last_run_quarantined gauge",
            "receipt_reconciler_last_run_quarantined{\(kind),row=\"notification\"} \(summary.notificationsQuarantinedCount ?? summary.notificationsQuarantined?.count ?? 0)",
            "receipt_reconciler_last_run_quarantined{\(kind),row=\"account\"} \(summary.accountsQuarantined?.count ?? 0)",
            "# HELP receipt_reconciler_last_run_failing_receipts Receipts failing --escalate-after runs in a row or more at the last run's end: each needs a person.",
            "# TYPE receipt_reconciler_last_run_failing_receipts gauge",
            "receipt_reconciler_last_run_failing_receipts{\(kind)} \(summary.accountsEscalatedCount ?? 0)",
            "# HELP receipt_reconciler_last_run_apple_requests Requests sent to Apple in the last run.",
            "# TYPE receipt_reconciler_last_run_apple_requests gauge",
            "receipt_reconciler_last_run_apple_requests{\(kind)} \(summary.appleRequests)",
        ]
        if let api = summary.apiRequests, !api.isEmpty {
            // Each metric's samples stand together, as the text format asks.
            let families: [(String, String, (APIEndpointUsage) -> String)] = [
                ("api_requests", "App Store Server API requests of the last run, by endpoint and environment.", { "\($0.requests)" }),
                ("api_throttled", "HTTP 429 answers of the App Store Server API in the last run.", { "\($0.throttled)" }),
                ("api_budget_used_ratio", "The last run's API requests over what its budget allowed in its time.", { String(format: "%.4f", $0.budgetUsed) }),
            ]
            for (name, help, value) in families {
                lines += ["# HELP receipt_reconciler_last_run_\(name) \(help)", "# TYPE receipt_reconciler_last_run_\(name) gauge"]
                for (key, usage) in api.sorted(by: { $0.key < $1.key }) {
                    lines.append("receipt_reconciler_last_run_\(name){\(kind),endpoint=\"\(key.endpoint.rawValue)\",environment=\"\(key.environment.rawValue)\"} \(value(usage))")
                }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Accounts by outcome, in the report's order: every account outcome, with `verified` split
    /// into `unchanged` and `corrected`. The switch keeps every table complete when an outcome is added.
    static func accountsByOutcome(_ summary: RunSummary) -> [(outcome: String, accounts: Int)] {
        AccountOutcome.allCases.flatMap { outcome -> [(outcome: String, accounts: Int)] in
            switch outcome {
            case .verified:
                [(outcome.rawValue, summary.accountsVerified), ("unchanged", summary.accountsUnchanged),
                 ("corrected", summary.accountsCorrected)]
            case .deferred: [(outcome.rawValue, summary.accountsDeferred)]
            case .failed: [(outcome.rawValue, summary.accountsFailed)]
            case .invalidReceipt: [(outcome.rawValue, summary.accountsInvalidReceipt)]
            }
        }
    }

    /// The rows of summary.md's accounts table: each account once (a verified one as `unchanged`
    /// or `corrected`), so that they add up to the accounts processed.
    static func accountOutcomeRows(_ summary: RunSummary) -> [(outcome: String, accounts: Int)] {
        accountsByOutcome(summary).filter { $0.outcome != AccountOutcome.verified.rawValue }
            .map { $0.outcome == "unchanged" || $0.outcome == "corrected" ? ("verified, \($0.outcome)", $0.accounts) : $0 }
    }

    public static func correctionFields(_ record: CorrectionRow) -> [String?] {
        [String(record.id), record.accountId, record.productId, record.kind.rawValue, record.reason, record.status.rawValue,
         record.appliedAt.map { Timestamp.format($0) }, record.beforeState, record.afterState,
         record.beforeExpiresAt.map { Timestamp.format($0) }, record.afterExpiresAt.map { Timestamp.format($0) }, record.environment]
    }
}

/// `42%`, `0.3%`: a share as the report prints it.
func percent(_ share: Double) -> String {
    let value = share * 100
    return value >= 10 || value == 0 ? "\(Int(value.rounded()))%" : String(format: "%.1f%%", value)
}
