import Foundation
import Testing
import TestSupport

/// Which test runs each option and variable as a user would (issue 33), checked against the
/// program's `--help` and the README's tables, so that the next option added without a README row
/// or a command-line test fails here instead of passing unseen.
///
/// A test listed for an option must run the built executable (`CLIProcess`, or the `explain`
/// helper) and name the option in its own body; what it observes is said in its doc comment.
/// `notYetCovered` are the known gaps, each listed in TESTING.md: an option in neither list fails.
@Suite struct CommandLineCoverageTests {
    static let coverage: [String: [String]] = [
        "--account": ["backfillSelectsWhatItsOptionsName"],
        "--all": ["sandboxDenyGrantsNothingFromASandboxReceipt", "theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "--app-apple-id": ["aNotificationThatKillsThreeRunsInARowIsQuarantinedByTheFourth"],
        "--apple-production-url": ["theAppleURLFlagsWinOverTheVariables"],
        "--apple-sandbox-url": ["theAppleURLFlagsWinOverTheVariables"],
        "--apple-root-certificate": ["inspectUsesTheRunsConfiguration", "aNotificationThatKillsThreeRunsInARowIsQuarantinedByTheFourth"],
        "--as-of": ["explainAsOfDecidesAtThatTime"],
        "--batch-size": ["theProgressIntervalIsHowOftenAProgressLineIsWritten"],
        "--bundle-id": ["inspectJSONNamesEachCheckAndExitsOneWhenOneFails"],
        "--database-url": ["theDatabaseURLFlagStandsInForTheVariableAndWins"],
        "--dry-run": ["aDryRunPrintsThePlanFirst"],
        "--exclude-old-transactions": ["excludeOldTransactionsIsSentToApple"],
        "--format": ["reportOfAPastRun"],
        "--from": ["theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells", "exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--to": ["theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells", "exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--include-sandbox": ["exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--json": ["inspectJSONNamesEachCheckAndExitsOneWhenOneFails", "explainAsOfDecidesAtThatTime"],
        "--ledger-refresh": ["ledgerRefreshZeroHealsAnEditMadeOutsideTheJob"],
        "--log-format": ["aRunsReportAndLogsEscapeHostileIdsAndTypes"],
        "--log-level": ["secretsNeverReachLogsOrReports"],
        "--max-attempts": ["maxAttemptsIsHowOftenAReceiptIsSent"],
        "--max-revoke-ratio": ["theRevokeRatioIsTheUsersAndCountsFromAHundredAccounts"],
        "--metrics-file": ["aRevokeRatioAbortExitsWith3"],
        "--notifications-only": ["notificationsOnlyVerifiesJustTheAccountsTheyMadeDue"],
        "--output": ["exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--product": ["backfillSelectsWhatItsOptionsName"],
        "--progress-interval": ["theProgressIntervalIsHowOftenAProgressLineIsWritten"],
        "--rate-limit": ["theRateLimitSpacesRequestsAsTheSimulatorSeesThem"],
        "--raw-cells": ["theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells"],
        "--receipt-id": ["backfillSelectsWhatItsOptionsName"],
        "--report-dir": ["reportOfAPastRun"],
        "--retry-quarantined": ["aNotificationThatKillsThreeRunsInARowIsQuarantinedByTheFourth",
                                "anAccountThatKillsThreeRunsInARowIsQuarantinedAndNoInnocentOneIs"],
        "--sandbox": ["sandboxDenyGrantsNothingFromASandboxReceipt"],
        "--shared-secret-file": ["theSharedSecretFileIsWhatAppleIsSentAndWinsOverTheVariable"],
        "--since": ["backfillSelectsWhatItsOptionsName"],
        "--until": ["backfillSelectsWhatItsOptionsName"],
        "--source": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "--window": ["aDryRunPrintsThePlanFirst"],
        "--authority": ["theAuthorityIsWhoseAnswerIsApplied"],
        "--api-budget-share": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--api-quota": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--appstore-api-url": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--appstore-issuer-id": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--appstore-key-id": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--appstore-private-key-file": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--appstore-sandbox-api-url": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--full-cycle": ["theAPIFlagsReachTheAPIAndSetItsBudgetAndCycle"],
        "--notification-history-since": ["notificationHistorySinceIsWhereTheFirstReadStarts"],
        "--concurrency": ["concurrencyIsHowManyRequestsAppleHasAtOnce"],
        "--expiry-lag": ["theExpiryLagHoldsARecentExpiry"],
        "--stale-after": ["staleAfterIsWhenAVerifiedAccountIsDueAgain"],
        "--notification-max-age": ["notificationMaxAgeIsWhenAnUnmatchedOneIsGivenUp"],
        "--request-timeout": ["theRequestTimeoutIsHowLongAnExchangeMayTake"],
        "--shard": ["aShardTakesExactlyItsAccounts"],
        "APPSTORE_APP_APPLE_ID": ["theAppAppleIdVariableIsWhatProductionNotificationsMustCarry"],
        "DATABASE_URL": ["theDatabaseURLFlagStandsInForTheVariableAndWins"],
        "APPLE_SHARED_SECRET": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "APPLE_PRODUCTION_URL": ["theAppleURLFlagsWinOverTheVariables", "loopbackHTTPIsTheSimulatorAndAllowed"],
        "APPLE_SANDBOX_URL": ["theAppleURLFlagsWinOverTheVariables", "loopbackHTTPIsTheSimulatorAndAllowed"],
        "APPLE_BUNDLE_ID": ["bundleIdVariablesAreCommaListsAndBothAreRead"],
        "APPSTORE_BUNDLE_ID": ["bundleIdVariablesAreCommaListsAndBothAreRead"],
        "APPSTORE_ISSUER_ID": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "APPSTORE_KEY_ID": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "APPSTORE_PRIVATE_KEY_FILE": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "APPSTORE_API_URL": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "APPSTORE_SANDBOX_API_URL": ["theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
    ]

    /// Known gaps (TESTING.md, "Command line"): options whose behaviour no command-line test
    /// observes yet. Shrinks to empty; an option may not be in both lists.
    static let notYetCovered: Set<String> = []

    /// The commands a user runs; `simulate-apple` and `seed-demo` are the demo's and the tests' tools.
    static let userCommands = [["run"], ["backfill"], ["migrate"], ["export-finance"], ["report"], ["ingest-notifications"],
                               ["explain"], ["inspect"]]
    static let toolCommands = [["simulate-apple", "serve"], ["simulate-apple", "sign-notifications"], ["seed-demo"]]

    static func options(of command: [String]) async throws -> Set<String> {
        let help = try await CLIProcess.run(["help"] + command, environment: [:])
        let options = help.stdout.split(separator: "\n").compactMap { line -> String? in
            line.firstMatch(of: /^\s+(?:-\w, )?(--[a-z0-9-]+)/).map { String($0.1) }
        }
        return Set(options).subtracting(["--help"])
    }

    static var readme: String { (try? String(contentsOf: TestPaths.repositoryRoot.appending(path: "README.md"), encoding: .utf8)) ?? "" }

    /// Every `--option` named in a row of one of the README's tables.
    static var readmeTableOptions: Set<String> {
        Set(readme.split(separator: "\n").filter { $0.hasPrefix("|") }.flatMap { row in
            row.matches(of: /--[a-z][a-z0-9-]*/).map { String($0.0) }
        })
    }

    /// The variables of the README's configuration table (its first column).
    static var readmeVariables: Set<String> {
        guard let start = readme.range(of: "### Configuration"), let end = readme.range(of: "### Exit status") else { return [] }
        return Set(readme[start.upperBound..<end.lowerBound].split(separator: "\n").filter { $0.hasPrefix("| `") }.flatMap { row in
            (row.split(separator: "|").first ?? "").matches(of: /`([A-Z][A-Z0-9_]+)`/).map { String($0.1) }
        })
    }

    /// Each `@Test` function's body, by name, from every test file.
    static var testBodies: [String: String] {
        var bodies: [String: String] = [:]
        let tests = TestPaths.repositoryRoot.appending(path: "Tests")
        for case let file as URL in FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil) ?? .init()
        where file.pathExtension == "swift" {
            guard let text = try? String(contentsOf: file, encoding: .utf8) else { continue }
            for part in text.components(separatedBy: "@Test").dropFirst() {
                if let name = part.firstMatch(of: /func (\w+)/) { bodies[String(name.1)] = part }
            }
        }
        return bodies
    }

    @Test func everyOptionHasAREADMERowAndACommandLineTest() async throws {
        var userOptions = Set<String>()
        for command in Self.userCommands { userOptions.formUnion(try await Self.options(of: command)) }
        var allOptions = userOptions
        for command in Self.toolCommands { allOptions.formUnion(try await Self.options(of: command)) }
        #expect(userOptions.count > 50, "the help was not read: \(userOptions.sorted())")

        // `--filter` is `scripts/test`'s (the test runner's), named in the table of fuzzers.
        let documented = Self.readmeTableOptions.subtracting(["--filter"])
        #expect(userOptions.subtracting(documented).isEmpty, "in --help, no README row: \(userOptions.subtracting(documented).sorted())")
        #expect(documented.subtracting(allOptions).isEmpty, "in the README, not in any --help: \(documented.subtracting(allOptions).sorted())")

        let variables = Self.readmeVariables
        #expect(variables.count >= 12, "\(variables.sorted())")
        let everything = userOptions.union(variables)
        let listed = Set(Self.coverage.keys)
        #expect(listed.isDisjoint(with: Self.notYetCovered), "\(listed.intersection(Self.notYetCovered).sorted())")
        let unaccounted = everything.subtracting(listed).subtracting(Self.notYetCovered)
        #expect(unaccounted.isEmpty, "no command-line test and not a known gap: \(unaccounted.sorted())")
        let stale = listed.union(Self.notYetCovered).subtracting(everything)
        #expect(stale.isEmpty, "listed here, but no longer in --help or the README: \(stale.sorted())")

        let bodies = Self.testBodies
        for (option, tests) in Self.coverage.sorted(by: { $0.key < $1.key }) {
            #expect(!tests.isEmpty, "\(option)")
            for test in tests {
                guard let body = bodies[test] else {
                    Issue.record("\(option): no test named \(test)")
                    continue
                }
                #expect(body.contains("CLIProcess") || body.contains("ExplainTests.explain"), "\(test) does not run the executable")
                #expect(body.contains("\"\(option)\""), "\(test) never names \(option)")
            }
        }
    }

    /// TESTING.md's boundary table and guarantee map name the tests that hold each promise: a
    /// test renamed or deleted would leave a row pointing at nothing, which nobody reading the map
    /// would notice. Every suite (`...Tests`) and test function (camelCase) a row names must exist.
    @Test func theGuaranteeMapNamesOnlyTestsThatExist() throws {
        let testing = try String(contentsOf: TestPaths.repositoryRoot.appending(path: "TESTING.md"), encoding: .utf8)
        let sections = ["## Boundaries", "## The README's guarantees and their tests"]
        var rows: [Substring] = []
        for heading in sections {
            let start = try #require(testing.range(of: heading + "\n"), "TESTING.md has no \(heading)")
            let rest = testing[start.upperBound...]
            let end = rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex
            rows += rest[..<end].split(separator: "\n").filter { $0.hasPrefix("| ") && !$0.hasPrefix("| ---") }.dropFirst()
        }
        #expect(rows.count > 40, "the tables were not read: \(rows.count) rows")

        let bodies = Self.testBodies
        var suites = Set<String>()
        let tests = TestPaths.repositoryRoot.appending(path: "Tests")
        for case let file as URL in FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil) ?? .init()
        where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            suites.formUnion(text.matches(of: /struct (\w+Tests)\b/).map { String($0.1) })
        }
        var named = 0
        for row in rows {
            let cell = row.split(separator: "|").last ?? ""
            for word in cell.matches(of: /[A-Za-z][A-Za-z0-9]+/).map({ String($0.0) }) {
                if word.first!.isUppercase, word.hasSuffix("Tests") {
                    named += 1
                    #expect(suites.contains(word), "TESTING.md names a suite that does not exist: \(word)")
                } else if word.first!.isLowercase, word.count > 12, word.contains(where: \.isUppercase) {
                    named += 1
                    #expect(bodies[word] != nil, "TESTING.md names a test that does not exist: \(word)")
                }
            }
        }
        #expect(named > 100, "\(named) names read")
    }
}
