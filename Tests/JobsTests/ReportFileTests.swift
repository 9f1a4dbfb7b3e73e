import Foundation
import ReportOutput
import Testing

/// Report files at rest (issue 32): created new beside their final name, never through a symlink
/// planted there, and readable by the owner and the group only, whatever the umask.
@Suite(.serialized) struct ReportFileTests {
    static func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-report-file-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    static func mode(_ url: URL) throws -> Int {
        try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int)
    }

    @Test func aSymlinkAtTheReportsNameIsReplacedNeverWrittenThrough() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let victim = directory.appending(path: "victim")
        try "precious\n".write(to: victim, atomically: true, encoding: .utf8)
        let report = directory.appending(path: "summary.md")
        try FileManager.default.createSymbolicLink(at: report, withDestinationURL: victim)
        let file = try ReportFile(report, header: "# report\n")
        try file.commit()
        #expect(try String(contentsOf: victim, encoding: .utf8) == "precious\n")
        #expect(try String(contentsOf: report, encoding: .utf8) == "# report\n")
        let type = try FileManager.default.attributesOfItem(atPath: report.path)[.type] as? FileAttributeType
        #expect(type == .typeRegular)
        // Nothing but the report and the victim is left: no partial file.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["summary.md", "victim"])
    }

    @Test func aReportIsOwnerAndGroupReadableOnlyWhateverTheUmask() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let previous = umask(0)
        defer { umask(previous) }
        let report = directory.appending(path: "corrections.csv")
        let file = try ReportFile(report, header: "a,b\n")
        try file.commit()
        #expect(try Self.mode(report) == 0o640)
    }

    @Test func aPartialFileNameTakenBySomethingElseIsNeverOpened() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let victim = directory.appending(path: "victim")
        try "precious\n".write(to: victim, atomically: true, encoding: .utf8)
        // The old fixed partial name, planted as a link: the writer picks a name of its own.
        try FileManager.default.createSymbolicLink(at: directory.appending(path: ".failures.csv.partial"), withDestinationURL: victim)
        let file = try ReportFile(directory.appending(path: "failures.csv"), header: "x\n")
        try file.commit()
        #expect(try String(contentsOf: victim, encoding: .utf8) == "precious\n")
        #expect(try String(contentsOf: directory.appending(path: "failures.csv"), encoding: .utf8) == "x\n")
    }
}
