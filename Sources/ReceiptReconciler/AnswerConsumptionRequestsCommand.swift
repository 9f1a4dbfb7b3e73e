import AppStore
import AppStoreModels
import ArgumentParser
import CommandLineValues
import Foundation
import Jobs
import Logging
import Postgres
import Reconciliation
import SignedData
import Storage

extension ConsumptionInformation.RefundPreference: ExpressibleByArgument {}
extension ConsumptionPolicy.SampleContent: ExpressibleByArgument {}

/// `answer-consumption-requests`: answers Apple's CONSUMPTION_REQUESTs within their 12 hours,
/// from the verified ledger and the customer's consent (docs/consumption.md).
struct AnswerConsumptionRequestsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "answer-consumption-requests",
        abstract: "Answers Apple's CONSUMPTION_REQUESTs (a customer asked for a refund) within 12 hours, from the ledger and the customer's consent.",
        discussion: """
            Run it every 15 to 60 minutes (cron/). It reads Apple's notification history for the requests of \
            the last 13 hours (with the App Store Connect key), verifies every stored V2 notification it has not \
            examined yet, and records each request in iap.consumption_answers before anything is sent: sent, \
            no_consent (an account holding the transaction has no row in iap.consumption_consent, or consented \
            false; with several holders, every one must consent: ambiguous_holder), past_deadline, refused \
            (Apple's 4xx and errorCode), failed, unmatched (examined again every run until the deadline), \
            advanced_commerce or answered_already (Apple took an answer for the transaction within 12 hours). \
            Each answer is decided again, consent read again, in the transaction that lets it leave. \
            Nothing is ever sent twice for one request, nor after the 12 hours. Exit 0 when it completed \
            (refusals included), 1 when Apple could not be asked (its history unread, an answer it never took: \
            what is left waits for the next run), 2 for the configuration (or Apple refusing the key), 4 when \
            another answering process runs.
            """
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions
    @OptionGroup var app: AppIdentityOptions
    @OptionGroup var appStoreConnect: AppStoreConnectOptions
    @OptionGroup var budget: ServerAPIBudgetOptions
    @OptionGroup var proxy: AppleProxyOptions

    @Flag(help: "Read Apple's notification history, decide and print each body that would be sent; store nothing, record nothing, send nothing.")
    var dryRun = false

    @Option(help: ArgumentHelp(
        "The refundPreference sent when the account's consent row names none: DECLINE, GRANT_FULL or GRANT_PRORATED (default: none, left out).",
        valueName: "preference"))
    var refundPreference: ConsumptionInformation.RefundPreference?

    @Option(help: ArgumentHelp(
        "sampleContentProvided: ledger (true when a holder's ledger shows a free trial of the product or its subscription group begun before the purchase; a paid introductory offer is no sample), always, or never.",
        valueName: "source"))
    var sampleContent: ConsumptionPolicy.SampleContent = .ledger

    @Option(help: "Stored notifications received longer ago than this are not examined (their 12 hours are over).")
    var lookBack = TimeLength(.seconds(3 * 86_400))

    @Option(help: ArgumentHelp("Write Prometheus metrics of this run here, for node_exporter's textfile collector.", valueName: "path"))
    var metricsFile: String?

    @Option(help: ArgumentHelp(
        "Push Prometheus metrics of this run to this Pushgateway at its end (on Kubernetes), e.g. http://pushgateway:9091 (default: $METRICS_PUSH_URL).",
        valueName: "url"))
    var metricsPush: String?

    func validate() throws {
        guard lookBack.seconds >= 3600 else { throw ValidationError("--look-back must be at least 1h") }
    }

    func run() async throws {
        let logger = logging.bootstrap()
        try await runReportingErrors(logger: logger) {
            let bundleIds = app.configuredBundleIds()
            guard !bundleIds.isEmpty else {
                throw ConfigurationError("answering needs the app's bundle id (APPSTORE_BUNDLE_ID or --bundle-id): signed data of no bundle is rejected")
            }
            let appAppleId = try app.configuredAppAppleId()
            let push = try MetricsPushSetting.resolve(metricsPush)
            let verifier = try SignedDataVerifier(configuration: .init(
                trustedRoots: try app.trustedRoots(), bundleIds: Set(bundleIds), appAppleId: appAppleId))
            // The key is needed to send. A dry run reads Apple's notification history with it when
            // it is there, and goes on from what is stored when it is not (and says so).
            let apiConfiguration = dryRun
                ? try? (appStoreConnect.credentials(bundleIds: bundleIds, appAppleId: appAppleId), appStoreConnect.endpoints())
                : (try appStoreConnect.credentials(bundleIds: bundleIds, appAppleId: appAppleId), try appStoreConnect.endpoints())
            let connection = try await PostgresConnection.connect(try database.connectionString())
            guard try await ConsumptionStore(connection: connection).tryLock() else {
                logger.error("consumption.locked", metadata: ["error": "another answer-consumption-requests holds the lock on this database"])
                throw ExitStatus.locked
            }
            let gateway = AppleGateway(concurrency: 4, budget: budget.budget(), proxy: proxy.proxy())
            defer { gateway.shutdown() }
            let client = apiConfiguration.map { credentials, endpoints in
                ServerAPIClient(
                    endpoints: endpoints, token: ServerAPIToken(credentials: credentials), gateway: gateway, policy: VerificationPolicy(),
                    logger: logger)
            }
            let answering = ConsumptionAnswering(
                store: ConsumptionStore(connection: connection), notifications: NotificationStore(connection: connection), verifier: verifier,
                client: client, policy: ConsumptionPolicy(sampleContent: sampleContent, defaultRefundPreference: refundPreference),
                lookBack: lookBack.seconds, logger: logger)
            let summary: ConsumptionSummary
            do {
                summary = try await answering.run(now: Date(), dryRun: dryRun) { line in
                    FileHandle.standardOutput.write(Data((line + "\n").utf8))
                }
            } catch let refused as ConsumptionAnswering.Unauthorized {
                await connection.close()
                throw ConfigurationError("Apple refused the App Store Connect key: \(refused)")
            }
            await connection.close()
            FileHandle.standardOutput.write(Data(summary.text.utf8))
            logger.info("consumption.finished", metadata: [
                "consumption.examined": .stringConvertible(summary.examined), "consumption.requests": .stringConvertible(summary.requests),
                "consumption.sent": .stringConvertible(summary.outcomes[.sent] ?? 0), "consumption.oldest_open_seconds": .stringConvertible(Int(summary.oldestOpenAge)),
            ])
            if let metricsFile, !dryRun {
                try RunReportWriter.write(summary.metrics, to: URL(filePath: metricsFile))
            }
            if let push, !dryRun {
                await push.publish(summary.metrics, kind: "answer_consumption_requests", shard: nil, logger: logger)
            }
            // Exit 1 when Apple could not be asked: a scheduler and the alerts see it, while what
            // is left waits for the next run (docs/consumption.md, "Exit status").
            if !summary.appleUnreachable.isEmpty {
                logger.error("consumption.apple_unreachable", metadata: [
                    "consumption.count": .stringConvertible(summary.appleUnreachable.count), "error": "\(summary.appleUnreachable.first ?? "")",
                ])
                throw ExitStatus.failed
            }
        }
    }
}
