import Foundation
import Testing
import TestSupport

/// Which test runs each option and variable as a user would (issue 33), checked against the
/// program's `--help` and the documentation's tables, so that the next option added without a row
/// or a command-line test fails here instead of passing unseen.
///
/// A test listed for an option must run the built executable (`CLIProcess`, or the `explain` and
/// `answer` helpers) and name the option in its own body; what it observes is said in its doc comment.
/// `notYetCovered` are the known gaps, each listed in TESTING.md: an option in neither list fails.
@Suite struct CommandLineCoverageTests {
    static let coverage: [String: [String]] = [
        "--account": ["backfillSelectsWhatItsOptionsName"],
        "--after": ["aDryRunAndAnAbortedRunSayNothingAndTheTextLayoutEscapes"],
        "--all": ["sandboxDenyGrantsNothingFromASandboxReceipt", "theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld"],
        "--app-apple-id": ["aNotificationThatKillsThreeRunsInARowIsQuarantinedByTheFourth"],
        "--apple-production-url": ["theAppleURLFlagsWinOverTheVariables"],
        "--apple-proxy": ["theEnvironmentsProxiesAndKeyLogAreNeverUsedOnlyApplesProxyIs"],
        "--apple-sandbox-url": ["theAppleURLFlagsWinOverTheVariables"],
        "--apple-root-certificate": ["inspectUsesTheRunsConfiguration", "aNotificationThatKillsThreeRunsInARowIsQuarantinedByTheFourth"],
        "--as-of": ["explainAsOfDecidesAtThatTime", "anExportIsReproducedByteForByteAsOfItsTime"],
        "--by": ["byRecordedListsWhatWasLearnedSinceTheCloseWhateverItsPeriod"],
        "--before": ["pruneDeletesOnlyWhatNothingNeedsAndCountsItFirst"],
        "--batch-size": ["theProgressIntervalIsHowOftenAProgressLineIsWritten"],
        "--bundle-id": ["inspectJSONNamesEachCheckAndExitsOneWhenOneFails"],
        "--database-url": ["theDatabaseURLFlagStandsInForTheVariableAndWins"],
        "--dry-run": ["aDryRunPrintsThePlanFirst", "aDryRunPrintsTheBodiesAndSendsAndRecordsNothing", "pruneDeletesOnlyWhatNothingNeedsAndCountsItFirst"],
        "--refund-preference": ["theBodyOfEachKindOfProduct"],
        "--sample-content": ["sampleContentAndLookBackAreTheOperators"],
        "--look-back": ["sampleContentAndLookBackAreTheOperators"],
        "--exclude-old-transactions": ["excludeOldTransactionsIsSentToApple"],
        "--format": ["reportOfAPastRun"],
        "--from": ["theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells", "exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--to": ["theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells", "exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--include-sandbox": ["exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--json": ["inspectJSONNamesEachCheckAndExitsOneWhenOneFails", "explainAsOfDecidesAtThatTime",
                   "aDryRunAndAnAbortedRunSayNothingAndTheTextLayoutEscapes"],
        "--limit": ["aDryRunAndAnAbortedRunSayNothingAndTheTextLayoutEscapes"],
        "--ledger-refresh": ["ledgerRefreshZeroHealsAnEditMadeOutsideTheJob"],
        "--log-format": ["aRunsReportAndLogsEscapeHostileIdsAndTypes"],
        "--log-level": ["secretsNeverReachLogsOrReports", "theLogLevelFiltersWhatIsWritten"],
        "--max-attempts": ["maxAttemptsIsHowOftenAReceiptIsSent"],
        "--max-revoke-ratio": ["theRevokeRatioIsTheUsersAndCountsFromAHundredAccounts"],
        "--revoke-ratio-minimum": ["theRevokeRatioMinimumIsTheUsers"],
        "--metrics-push": ["eachRunPushesToItsGroupAndOnlyACompletedRunMovesTheLastSuccess"],
        "METRICS_PUSH_URL": ["aGatewayThatCannotBeReachedIsLoggedAndChangesNothingElse"],
        "APPLE_PROXY": ["theEnvironmentsProxiesAndKeyLogAreNeverUsedOnlyApplesProxyIs"],
        "--first-night": ["aFirstNightPrintsWhatItTakesAwayPerProductBeforeApplying"],
        "--metrics-file": ["aRevokeRatioAbortExitsWith3", "transientErrorsPastTheDeadlineEndFailed"],
        "--notifications-only": ["notificationsOnlyVerifiesJustTheAccountsTheyMadeDue"],
        "--output": ["exportFinanceWritesItsFileAndLeavesSandboxOutUnlessAsked"],
        "--product": ["backfillSelectsWhatItsOptionsName"],
        "--progress-interval": ["theProgressIntervalIsHowOftenAProgressLineIsWritten"],
        "--rate-limit": ["theRateLimitSpacesRequestsAsTheSimulatorSeesThem"],
        "--summary": ["theSummaryTiesOutPerCurrencyAndEvent"],
        "--raw-cells": ["theFinanceCSVNeverCarriesAFormulaUnlessAskedForRawCells"],
        "--receipt-id": ["backfillSelectsWhatItsOptionsName"],
        "--report-dir": ["reportOfAPastRun"],
        "--retry-rejected": ["aForgedBodyBesideAValidOneStopsNoRun"],
        "--escalate-after": ["aReceiptFailingRunAfterRunIsReportedAndAMalformedOneSetAside"],
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
        "--expiry-lag": ["theExpiryLagHoldsARecentExpiry", "explainsExpiryLagIsTheOneGiven"],
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
                               ["explain"], ["inspect"], ["corrections"], ["runs"], ["answer-consumption-requests"], ["prune"]]
    static let toolCommands = [["simulate-apple", "serve"], ["simulate-apple", "sign-notifications"], ["seed-demo"]]

    static func options(of command: [String]) async throws -> Set<String> {
        let help = try await CLIProcess.run(["help"] + command, environment: [:])
        let options = help.stdout.split(separator: "\n").compactMap { line -> String? in
            line.firstMatch(of: /^\s+(?:-\w, )?(--[a-z0-9-]+)/).map { String($0.1) }
        }
        return Set(options).subtracting(["--help"])
    }

    static func text(_ path: String) -> String {
        (try? String(contentsOf: TestPaths.repositoryRoot.appending(path: path), encoding: .utf8)) ?? ""
    }

    /// The README and every page of `docs/`: where a user reads about an option.
    static var documentation: String {
        let docs = (try? FileManager.default.contentsOfDirectory(atPath: TestPaths.repositoryRoot.appending(path: "docs").path)) ?? []
        return ([text("README.md")] + docs.filter { $0.hasSuffix(".md") }.sorted().map { text("docs/\($0)") }).joined(separator: "\n")
    }

    static var configurationReference: String { text("docs/configuration.md") }

    /// Every `--option` named in a row of one of the documentation's tables.
    static var documentedTableOptions: Set<String> {
        Set(documentation.split(separator: "\n").filter { $0.hasPrefix("|") }.flatMap { row in
            row.matches(of: /--[a-z][a-z0-9-]*/).map { String($0.0) }
        })
    }

    /// The variables of the configuration reference's environment table (its first column).
    static var referenceVariables: Set<String> {
        let reference = configurationReference
        guard let start = reference.range(of: "## Environment and flags") else { return [] }
        return Set(reference[start.upperBound...].split(separator: "\n").filter { $0.hasPrefix("| `") }.flatMap { row in
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

    @Test func everyOptionIsDocumentedAndHasACommandLineTest() async throws {
        var userOptions = Set<String>()
        for command in Self.userCommands { userOptions.formUnion(try await Self.options(of: command)) }
        var allOptions = userOptions
        for command in Self.toolCommands { allOptions.formUnion(try await Self.options(of: command)) }
        #expect(userOptions.count > 50, "the help was not read: \(userOptions.sorted())")

        // `--filter` is `scripts/test`'s (the test runner's), named in the table of fuzzers.
        let documented = Self.documentedTableOptions.subtracting(["--filter"])
        #expect(userOptions.subtracting(documented).isEmpty, "in --help, no row in the docs: \(userOptions.subtracting(documented).sorted())")
        #expect(documented.subtracting(allOptions).isEmpty, "in the docs, not in any --help: \(documented.subtracting(allOptions).sorted())")

        let variables = Self.referenceVariables
        #expect(variables.count >= 12, "\(variables.sorted())")
        let everything = userOptions.union(variables)
        let listed = Set(Self.coverage.keys)
        #expect(listed.isDisjoint(with: Self.notYetCovered), "\(listed.intersection(Self.notYetCovered).sorted())")
        let unaccounted = everything.subtracting(listed).subtracting(Self.notYetCovered)
        #expect(unaccounted.isEmpty, "no command-line test and not a known gap: \(unaccounted.sorted())")
        let stale = listed.union(Self.notYetCovered).subtracting(everything)
        #expect(stale.isEmpty, "listed here, but no longer in --help or the configuration reference: \(stale.sorted())")

        let bodies = Self.testBodies
        for (option, tests) in Self.coverage.sorted(by: { $0.key < $1.key }) {
            #expect(!tests.isEmpty, "\(option)")
            for test in tests {
                guard let body = bodies[test] else {
                    Issue.record("\(option): no test named \(test)")
                    continue
                }
                #expect(body.contains("CLIProcess") || body.contains("ExplainTests.explain") || body.contains("ConsumptionAnswerTests.answer"),
                        "\(test) does not run the executable")
                #expect(body.contains("\"\(option)\""), "\(test) never names \(option)")
            }
        }
    }

    /// What `--help` says of each option, by option: its whole description, on one line.
    static func helpEntries(of command: [String]) async throws -> [String: String] {
        let help = try await CLIProcess.run(["help"] + command, environment: [:]).stdout
        var entries: [String: String] = [:]
        var current: String?
        for line in help.split(separator: "\n").drop(while: { $0 != "OPTIONS:" }).dropFirst() {
            if let option = line.firstMatch(of: /^\s{1,4}(?:-\w, )?(--[a-z0-9-]+)/) {
                current = String(option.1)
                entries[current!] = String(line)
            } else if let current {
                entries[current, default: ""] += " " + line.trimmingCharacters(in: .whitespaces)
            }
        }
        entries["--help"] = nil
        return entries
    }

    /// A default as written in either place, so that `1m` and `60s`, `0.1` and `0.10` agree.
    static func normalized(_ value: String) -> String {
        let value = value.trimmingCharacters(in: CharacterSet(charactersIn: "` ")).lowercased()
        if let time = value.wholeMatch(of: /(\d+(?:\.\d+)?)(ms|s|m|h|d)/), let number = Double(time.1) {
            let seconds = ["ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400][String(time.2)]!
            return "\(number * seconds)s"
        }
        if let number = Double(value) { return "\(number)" }
        return value
    }

    /// The configuration reference (docs/configuration.md) is `--help` in one place: every
    /// option of every user command has a row in a section of that command (or of every command),
    /// its default there is the one `--help` states, and a default `--help` takes from a variable
    /// names that variable in the row.
    @Test func theConfigurationReferenceAgreesWithHelp() async throws {
        // Sections and their rows; a section's commands are the backticked words of its heading.
        var sections: [(commands: Set<String>, rows: [[String]])] = []
        for line in Self.configurationReference.split(separator: "\n") {
            if line.hasPrefix("## ") {
                let named = Set(line.matches(of: /`([a-z-]+)/).map { String($0.1) })
                sections.append((named, []))
            } else if line.hasPrefix("| `") || line.hasPrefix("| -"), !line.hasPrefix("|--"), !sections.isEmpty {
                // `\|` is a bar inside a cell (`--sandbox allow\|deny`), not a cell's end.
                sections[sections.count - 1].rows.append(line.replacingOccurrences(of: "\\|", with: "\u{1}")
                    .split(separator: "|", omittingEmptySubsequences: false)
                    .dropFirst().map { $0.replacingOccurrences(of: "\u{1}", with: "|").trimmingCharacters(in: .whitespaces) })
            }
        }
        #expect(sections.count >= 8, "docs/configuration.md was not read: \(sections.count) sections")

        var checkedDefaults = 0
        for command in Self.userCommands {
            let name = command[0]
            for (option, help) in try await Self.helpEntries(of: command).sorted(by: { $0.key < $1.key }) {
                // A row names the option as its first backticked word, in its first or second cell.
                func names(_ row: [String]) -> Bool {
                    row.prefix(2).contains { cell in
                        cell.matches(of: /`(--[a-z0-9-]+)/).contains { $0.1 == option }
                    }
                }
                let own = sections.filter { $0.commands.contains(name) }.flatMap(\.rows).filter(names)
                let common = sections.filter { $0.commands.isEmpty }.flatMap(\.rows).filter(names)
                guard let row = own.first ?? common.first else {
                    Issue.record("\(name) \(option): no row in docs/configuration.md")
                    continue
                }
                guard let stated = help.matches(of: /default: ([^)]*)\)/).last.map({ String($0.1) }) else { continue }
                let variables = stated.matches(of: /\$([A-Z][A-Z0-9_]+)/).map { String($0.1) }
                if !variables.isEmpty {
                    for variable in variables {
                        #expect(row.joined(separator: "|").contains("`\(variable)`"), "\(name) \(option): --help's default is $\(variable), its row does not name it")
                    }
                } else if stated.wholeMatch(of: /[A-Za-z0-9._\/-]+/) != nil {
                    #expect(row.count >= 3 && Self.normalized(row[1]) == Self.normalized(stated),
                            "\(name) \(option): --help says the default is \(stated), docs/configuration.md says \(row.count >= 3 ? row[1] : "nothing")")
                }
                checkedDefaults += 1
            }
        }
        #expect(checkedDefaults > 60, "\(checkedDefaults) defaults compared")
    }

    /// The README's "How it is built" table is the tree: every folder of `Sources/` has a row,
    /// and every module a row names is a folder, so a newcomer's map is never out of date.
    @Test func theREADMEsModuleTableIsTheTree() throws {
        let readme = Self.text("README.md")
        let start = try #require(readme.range(of: "## How it is built\n"))
        let rest = readme[start.upperBound...]
        let table = rest[..<(rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex)]
        let named = Set(table.split(separator: "\n").filter { $0.hasPrefix("| `") }.flatMap { row in
            (row.split(separator: "|").first ?? "").matches(of: /`([A-Za-z-]+)`/).map { String($0.1) }
        })
        let folders = Set(try FileManager.default.contentsOfDirectory(atPath: TestPaths.repositoryRoot.appending(path: "Sources").path)
            .filter { !$0.hasPrefix(".") })
        #expect(folders.count > 20)
        #expect(folders.subtracting(named).isEmpty, "folders of Sources/ without a row: \(folders.subtracting(named).sorted())")
        #expect(named.subtracting(folders).isEmpty, "rows naming no folder of Sources/: \(named.subtracting(folders).sorted())")
    }

    /// TESTING.md's boundary table and guarantee map name the tests that hold each promise: a
    /// test renamed or deleted would leave a row pointing at nothing, which nobody reading the map
    /// would notice. Every suite (`...Tests`) and test function (camelCase) a row names must exist.
    @Test func theGuaranteeMapNamesOnlyTestsThatExist() throws {
        let testing = try String(contentsOf: TestPaths.repositoryRoot.appending(path: "TESTING.md"), encoding: .utf8)
        let sections = ["## Boundaries", "## The documented guarantees and their tests"]
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
                } else if word.first!.isLowercase, word.contains(where: \.isUppercase) {
                    named += 1
                    #expect(bodies[word] != nil, "TESTING.md names a test that does not exist: \(word)")
                }
            }
        }
        #expect(named > 100, "\(named) names read")
    }
}
