import Foundation
import Testing
import TestSupport

/// The house's size rule (issue 34), kept by a lint: a file a newcomer opens fits in one reading.
@Suite struct HouseRulesTests {
    /// No source file over 400 lines: the run, the store and the clients are cut along their
    /// seams (phases, reading and writing, the handle apart from the connection) instead.
    @Test func noSourceFileIsOver400Lines() throws {
        let long = try TestPaths.sources.filter { $0.path.hasSuffix(".swift") }
            .map { (path: $0.path, lines: $0.text.split(separator: "\n", omittingEmptySubsequences: false).count) }
            .filter { $0.lines > 400 }
        #expect(long.isEmpty, "\(long.map { "\($0.path): \($0.lines) lines" })")
        #expect(try TestPaths.sources.count > 100, "the sources were not read")
    }

    /// The repository stands alone: nothing cites a document outside it. The first migrations'
    /// comments name sections of the design document they were written against, and an applied
    /// migration is never edited, so docs/database.md says where each of those rules is stated now.
    @Test func nothingCitesADocumentOutsideTheRepository() throws {
        let mapping = try String(contentsOf: TestPaths.repositoryRoot.appending(path: "docs/database.md"), encoding: .utf8)
        var read = 0
        for (path, text) in TestPaths.repositoryTexts
        where [".swift", ".md", ".sql", ".sh", ".yaml", ".service", ".timer"].contains(where: path.hasSuffix) || path.hasPrefix("scripts/") {
            read += 1
            let outside = [".." + "/shared", "shared" + "/contract"]  // split: this file names them without citing them
            #expect(!outside.contains(where: text.contains), "\(path) points outside the repository")
            let cited = text.replacing("\n-- ", with: " ").matches(of: /[Cc]ontract\s+sections?\s+(\d+)(?:\s+and\s+(\d+))?/)
            guard !cited.isEmpty, path != "docs/database.md" else { continue }
            // Migrations' earlier texts are kept byte for byte (RewrittenMigrationTests).
            #expect(path.hasPrefix("Migrations/") || path.hasPrefix("Tests/PostgresTests/FormerMigrations/"),
                    "\(path) cites the design document: cite the docs page that states the rule")
            for match in cited {
                for number in [match.output.1, match.output.2].compactMap({ $0 }) {
                    #expect(mapping.contains("| \(number) | "), "\(path) cites section \(number), which docs/database.md does not map")
                }
            }
        }
        #expect(read > 150, "the repository was not read")
    }

    /// A citation in the code (docs/PAGE.md, "Section") names a page and a heading that exist, so a
    /// reader who follows it finds the rule (a heading may go on past the cited words).
    @Test func everyCitedSectionExists() throws {
        let root = TestPaths.repositoryRoot
        var cited = 0
        for (path, text) in TestPaths.repositoryTexts where ["Sources/", "Tests/", "Migrations/", "cron/", "scripts/"].contains(where: path.hasPrefix) {
            for match in text.replacing(/\n\s*(\/\/\/?|--|#)\s*/, with: " ").matches(of: /docs\/([a-z-]+\.md), "([^"]+)"/) {
                cited += 1
                let page = try? String(contentsOf: root.appending(path: "docs/" + match.output.1), encoding: .utf8)
                let headings = (page ?? "").split(separator: "\n").filter { $0.hasPrefix("#") }
                    .map { $0.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces) }
                #expect(headings.contains { $0.hasPrefix(match.output.2) },
                        "\(path) cites docs/\(match.output.1), \"\(match.output.2)\", which has no such heading")
            }
        }
        #expect(cited > 50, "no citation was read")
    }
}
