import AppStoreModels
import CommandLineValues
import ArgumentParser
import CivilCalendar
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage

/// `explain ACCOUNT`: the evidence behind every entitlement of one account, for support
/// (docs/explain.md). From the database alone; the decision is re-made by the run's rules.
struct ExplainCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Shows why an account has, or does not have, each entitlement: the evidence and the rule's decision.",
        discussion: """
            Reads only the database (no request to Apple): the account's receipts, its ledger by product and chain, \
            the renewal state Apple last gave, the stored iap.entitlements rows, every correction ever made and the \
            server notifications matched to it. For each product the entitlement rules decide again, as of now or \
            --as-of, from the stored ledger and renewal state, with the same code a run uses; where the stored row \
            differs, the line says what the next run that verifies the account would change. Exit 1 when nothing is \
            stored about the account or the database cannot be read.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The account id (iap.app_receipts.account_id).")
    var account: String

    @Flag(help: "JSON for tools (its shape is in docs/explain.md) instead of text for a person.")
    var json = false

    @Option(help: ArgumentHelp("Decide as of this time (ISO 8601, e.g. 2026-11-20T12:00:00Z) instead of now.", valueName: "time"))
    var asOf: String?

    @Option(help: "Whether sandbox purchases grant entitlements, as for run: allow or deny.")
    var sandbox = RunOptions.defaults.sandboxPolicy

    @Option(help: "The expiry lag, as for run: a revoke of an expiry that passed less than this long ago waits.")
    var expiryLag = TimeLength(RunOptions.defaults.expiryLag)

    func validate() throws {
        if let asOf, CommandLineTime.parse(asOf) == nil { throw ValidationError("--as-of: not an ISO 8601 date or time: \(asOf)") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let connection = try await PostgresConnection.connect(try database.connectionString())
            let now = asOf.flatMap(CommandLineTime.parse) ?? Date()
            let evidence = try await EvidenceStore(connection: connection).evidence(of: account)
            let store = ReconciliationStore(connection: connection)
            let catalog = try await store.catalog()
            // As the next run would decide: before the import, a first row granting nothing is a revoke
            // for an account stored before the first night began.
            let adoption = try await store.adoption()
            let isFirstNight = adoption.countsFirstRowAsLoss(accountStoredAt: try await store.firstStored(accountId: account))
            await connection.close()
            guard !evidence.isEmpty else {
                FileHandle.standardError.write(Data("explain: nothing is stored about account \(account.debugDescription): no receipt, ledger row, entitlement, correction or notification\n".utf8))
                throw ExitStatus.failed
            }
            let decisions = Explanation.decisions(
                evidence, rules: EntitlementRules(catalog: catalog, sandboxPolicy: sandbox),
                diff: EntitlementDiff(expiryLag: expiryLag.seconds, isFirstNight: isFirstNight), now: now)
            let output = json
                ? ExplainOutput.json(evidence, decisions, now: now, isFirstNight: isFirstNight)
                : ExplainOutput.text(evidence, decisions, now: now, isFirstNight: isFirstNight)
            FileHandle.standardOutput.write(Data(output.utf8))
        }
    }
}

/// The two layouts of an explanation. Every value in the text layout came from the database or
/// from Apple and is escaped (`DisplayText`): an id cannot split a line or reach the terminal raw.
enum ExplainOutput {
    static func time(_ date: Date?) -> String { date.map { Timestamp.format($0) } ?? "-" }

    static func state(_ entitlement: Entitlement?) -> String {
        guard let entitlement else { return "no row" }
        var text = "\(entitlement.state.rawValue), \(entitlement.entitled ? "entitled" : "not entitled")"
        if let refunded = entitlement.refundedAt { text += ", refunded \(time(refunded))" }
        if let expires = entitlement.expiresAt {
            // A refunded or upgraded row keeps its transaction's expiry: it is not when access ends.
            text += entitlement.state == .refunded || entitlement.state == .upgraded
                ? ", was paid until \(time(expires))" : ", expires \(time(expires))"
        }
        if let grace = entitlement.gracePeriodExpiresAt { text += ", grace until \(time(grace))" }
        text += "  (transaction \(entitlement.latestTransactionId ?? "-"), chain \(entitlement.originalTransactionId)"
        if let environment = entitlement.environment { text += ", \(environment)" }
        return DisplayText.escaped(text + ")")
    }

    /// Columns aligned with two spaces between them; the last column is not padded. Cells are escaped.
    static func table(_ header: [String], _ rows: [[String]], indent: String = "  ") -> String {
        let all = ([header] + rows).map { $0.map(DisplayText.escaped) }
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            indent + row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }

    /// `21199 (internal data access error)`.
    static func status(_ status: Int?) -> String {
        status.map { "\($0) (\(AppleCodes.verifyReceiptStatus($0)))" } ?? "-"
    }

    /// Why no run changes the account, receipt by receipt, as failures.csv said it; nil when verified.
    static func standing(_ standing: AccountStanding) -> [String] {
        switch standing {
        case .verified:
            return []
        case .noReceipts:
            return ["NOT VERIFIED: no receipt is stored for this account, so no run verifies it and none changes its entitlements;",
                    "  the stored rows stay as they are."]
        case .unverified(let failing, let neverSent):
            var lines = ["NOT VERIFIED: no run changes this account's entitlements until every one of its receipts verifies;",
                         "  the stored rows stay as they are until then."]
            for receipt in failing {
                if receipt.lastOutcome == ReceiptOutcome.quarantined.rawValue {
                    lines.append(DisplayText.escaped("  receipt \(receipt.id): quarantined: \(receipt.lastFailure?.reason ?? "set aside")"
                        + "; set aside, never sent, until `receipt-reconciler backfill --retry-quarantined` releases its account"))
                    continue
                }
                var line = "  receipt \(receipt.id): \(receipt.lastOutcome ?? "?")"
                if let failure = receipt.lastFailure {
                    line += " after \(failure.attempts) attempt(s)" + (failure.endpoints.isEmpty ? "" : " (\(failure.endpoints))")
                        + ": \(failure.reason)"
                }
                if let status = receipt.lastStatus {
                    line += receipt.lastFailure?.reason.contains(String(status)) == true
                        ? " (\(status): \(AppleCodes.verifyReceiptStatus(status)))" : "; Apple status \(Self.status(status))"
                }
                line += "; \(receipt.attempts) run(s) in a row failed"
                line += receipt.nextAttemptAt.map { "; tried again by the first run after \(Explanation.moment($0))" } ?? "; tried again by the next run"
                lines.append(DisplayText.escaped(line))
            }
            for receipt in neverSent {
                lines.append("  receipt \(receipt.id): never sent to Apple yet; the next run verifies it")
            }
            return lines
        }
    }

    /// The text for support. Long on purpose: the sections in the order support reads them (the
    /// verdict, what is not verified, the decisions, receipts, ledger, renewals, corrections,
    /// notifications), each a few lines of the same table helper.
    static func text(_ evidence: AccountEvidence, _ decisions: [ProductDecision], now: Date, isFirstNight: Bool = false) -> String {
        let standing = AccountStanding(receipts: evidence.receipts)
        var out = "Account \(DisplayText.escaped(evidence.accountId)), as of \(time(now))\n"
        // Support's question first: access or not, per product, in words.
        if decisions.isEmpty { out += "  no product: nothing is entitled\n" }
        for decision in decisions {
            var line = "  \(DisplayText.escaped(decision.productId)): \(decision.verdict.text)"
            if let next = decision.nextRun, next.kind == .grant || next.kind == .revoke {
                line += decision.heldByExpiryLag ? "; a run after the expiry lag would \(next.kind.rawValue) it" : "; the next run would \(next.kind.rawValue) it"
            }
            out += DisplayText.escaped(line) + "\n"
        }
        if isFirstNight {
            out += "  (a first night: the app's access was never imported and this account was stored before the first night "
                + "began, so a product with no stored row that Apple grants nothing counts as a revoke; docs/adoption.md, \"The first night\")\n"
        }
        if let quarantine = evidence.quarantine {
            out += "\n" + DisplayText.escaped("QUARANTINED since \(time(quarantine.since)): \(quarantine.reason).") + "\n"
                + "  Its receipts fail unread and no run changes its entitlements until `receipt-reconciler backfill --retry-quarantined`"
                + " releases it.\n"
        }
        let notVerified = Self.standing(standing)
        if !notVerified.isEmpty { out += "\n" + notVerified.joined(separator: "\n") + "\n" }
        out += "\nEntitlements: the rules' decision from the stored evidence, beside the stored row\n"
        if decisions.isEmpty { out += "  (no product)\n" }
        for decision in decisions {
            out += "  \(DisplayText.escaped(decision.productId))  \(decision.type.rawValue) (\(decision.typeFrom))\n"
            let decided = decision.type == .consumable ? "no entitlement (consumable)"
                : decision.decided == nil && !standing.allowsCorrections ? "nothing yet: the account is not verified" : state(decision.decided)
            out += "    decided  \(decided)\n"
            out += "    stored   \(state(decision.stored))\n"
            for (index, line) in decision.why.enumerated() { out += "    \(index == 0 ? "why     " : "        ") \(DisplayText.escaped(line))\n" }
            if let next = decision.nextRun {
                let when = decision.heldByExpiryLag ? "a run after the expiry lag" : "the next run"
                out += "    DIFFERS  \(when) would \(next.kind.rawValue): \(DisplayText.escaped(next.reason))\n"
            } else if !standing.allowsCorrections {
                out += "    held     the account is not verified: no run changes this row until every receipt verifies\n"
            } else {
                out += "    agrees   the stored row is what the rules decide\n"
            }
        }
        out += "\nReceipts\n"
        out += evidence.receipts.isEmpty ? "  (none)\n" : table(
            ["id", "environment", "last status", "outcome", "last verified", "next attempt", "runs failed", "local decode"],
            evidence.receipts.map { receipt in
                [String(receipt.id), receipt.environment ?? "-", status(receipt.lastStatus), receipt.lastOutcome ?? "never run",
                 time(receipt.lastVerifiedAt), time(receipt.nextAttemptAt), String(receipt.attempts),
                 receipt.localBundleId.map { "\($0), \(receipt.localOriginalTransactionIds?.count ?? 0) chain(s)" } ?? "did not decode"]
            })
        out += "\nLedger, by product and chain, newest first\n"
        if evidence.ledger.isEmpty { out += "  (none)\n" }
        let chains = Dictionary(grouping: evidence.ledger) {
            "\($0.transaction.productId), chain \($0.transaction.originalTransactionId ?? $0.transaction.transactionId)"
        }
        for chain in chains.keys.sorted() {
            out += "  \(DisplayText.escaped(chain))\n"
            let rows = chains[chain]!.sorted { ($0.transaction.purchaseDate ?? .distantPast) > ($1.transaction.purchaseDate ?? .distantPast) }
            out += table(
                ["transaction", "purchased", "expires", "cancelled", "upgraded", "ownership", "environment", "source"],
                rows.map { row in
                    let transaction = row.transaction
                    let cancelled = transaction.cancellationDate.map { date in
                        "\(time(date)) (reason \(transaction.cancellationReason.map { "\($0): \(AppleCodes.cancellationReason($0))" } ?? "-"))"
                    } ?? "-"
                    return [transaction.transactionId, time(transaction.purchaseDate), time(transaction.expiresDate), cancelled,
                            transaction.isUpgraded == true ? "yes" : "-", transaction.inAppOwnershipType ?? "-", row.environment.rawValue,
                            row.source]
                }, indent: "    ")
        }
        out += "\nRenewal state Apple last gave\n"
        out += evidence.renewals.isEmpty ? "  (none stored)\n" : table(
            ["chain", "product", "auto-renew", "next product", "billing retry", "grace until", "expiration intent", "environment"],
            evidence.renewals.map { renewal in
                let info = renewal.info
                return [info.originalTransactionId ?? "-", info.productId ?? "-", info.autoRenewStatus.map { $0 ? "on" : "off" } ?? "-",
                        info.autoRenewProductId ?? "-", info.isInBillingRetryPeriod.map { $0 ? "yes" : "no" } ?? "-",
                        time(info.gracePeriodExpiresDate), info.expirationIntent.map { "\($0) (\(AppleCodes.expirationIntent($0)))" } ?? "-",
                        renewal.environment.rawValue]
            })
        out += "\nCorrections, newest first\n"
        out += evidence.corrections.isEmpty ? "  (none)\n" : table(
            ["run", "run started", "product", "kind", "status", "applied", "reason"],
            evidence.corrections.map { correction in
                // A dry run's plan is read, never applied: said so where its status stands.
                let status = correction.status.rawValue + (correction.isDryRun ? " (dry run, never applied)" : "")
                return [String(correction.runId), time(correction.runStartedAt), correction.productId, correction.kind.rawValue, status,
                        time(correction.appliedAt), correction.reason]
            })
        out += "\nServer notifications, newest first\n"
        out += evidence.notifications.isEmpty ? "  (none)\n" : table(
            ["id", "received", "type", "outcome", "processed", "reason"],
            evidence.notifications.map { [String($0.id), time($0.receivedAt), $0.type, $0.outcome ?? "unprocessed", time($0.processedAt), $0.reason ?? "-"] })
        let quarantined = evidence.quarantinedNotificationIds
        if !quarantined.isEmpty {
            let shown = quarantined.prefix(10).map(String.init).joined(separator: ", ") + (quarantined.count > 10 ? ", ..." : "")
            out += "  and \(quarantined.count) quarantined notification(s) of no known account (\(shown)): each stopped the process "
                + "three times before it was matched, so any of them may concern this account; "
                + "`receipt-reconciler backfill --retry-quarantined` processes them once the cause is fixed\n"
        }
        out += "\nMoney (the finance journal), as it moved\n"
        out += evidence.moneyEvents.isEmpty ? "  (none)\n" : table(
            ["when", "event", "transaction", "product", "amount", "currency", "from", "revocation", "recorded"],
            evidence.moneyEvents.map { event in
                [time(event.time), event.kind.rawValue + (event.adjusts.map { " of \($0.rawValue)" } ?? ""), event.transactionId, event.productId,
                 event.amount.map(MoneyText.decimal(milliunits:)) ?? "-", event.currency ?? "-", event.amountSource.rawValue,
                 event.revocationType.map { type in type + (event.revocationPercentage.map { " \($0)" } ?? "") } ?? "-",
                 time(event.recordedAt)]
            })
        out += "\nRefund questions (CONSUMPTION_REQUEST) and the answers, newest first\n"
        out += evidence.consumptionAnswers.isEmpty ? "  (none)\n" : table(
            ["asked", "transaction", "reason", "outcome", "answered", "apple", "body or why"],
            evidence.consumptionAnswers.map { answer in
                [time(answer.requestedAt), answer.transactionId, answer.reason ?? "-", answer.outcome + (answer.why.map { " (\($0))" } ?? ""),
                 time(answer.answeredAt),
                 answer.httpStatus.map { "HTTP \($0)" + (answer.errorCode.map { " \($0)" } ?? "") } ?? "-",
                 [answer.body, answer.detail].compactMap { $0 }.joined(separator: "; ")]
            })
        return out
    }

    /// `--json`: the documented shape (docs/explain.md), `ExplainDocument`.
    static func json(_ evidence: AccountEvidence, _ decisions: [ProductDecision], now: Date, isFirstNight: Bool = false) -> String {
        // Plain values and arrays of them: encoding cannot fail.
        (try? ProgramJSON.pretty(ExplainDocument(evidence, decisions, now: now, isFirstNight: isFirstNight))) ?? "{}\n"
    }
}
