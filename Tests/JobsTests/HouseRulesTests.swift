import Foundation
import Testing
import TestSupport

/// The house's size rule (issue 34), kept by a lint: a file a newcomer opens fits in one reading.
@Suite struct HouseRulesTests {
    /// No source file over 400 lines: the run, the store and the clients are cut along their
    /// seams (phases, reading and writing, the handle apart from the connection) instead.
    @Test func noSourceFileIsOver400Lines() throws {
        let long = try SecurityTests.sources.filter { $0.path.hasSuffix(".swift") }
            .map { (path: $0.path, lines: $0.text.split(separator: "\n", omittingEmptySubsequences: false).count) }
            .filter { $0.lines > 400 }
        #expect(long.isEmpty, "\(long.map { "\($0.path): \($0.lines) lines" })")
        #expect(try SecurityTests.sources.count > 100, "the sources were not read")
    }
}
