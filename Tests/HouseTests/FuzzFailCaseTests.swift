import Foundation
import Testing
import TestSupport

/// Every input that ever crashed a parser (FuzzTesting/FailCases/TARGET) is replayed by the
/// ordinary build of `receipt-fuzz` on every test run, plain and under the thread sanitizer: a
/// crash that was fixed stays fixed even where nobody runs `scripts/fuzz`.
@Suite struct FuzzFailCaseTests {
    static let failCases = TestPaths.repositoryRoot.appending(path: "FuzzTesting/FailCases")

    static var targets: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: failCases.path)) ?? []).sorted()
    }

    @Test func everyTargetHasItsFailCasesHere() {
        // The directories are the targets' names; an empty list would make the test below vacuous.
        #expect(Set(Self.targets).isSuperset(of: ["command-line", "inspect", "jws", "jws-signed", "verify-receipt"]), "\(Self.targets)")
    }

    @Test(arguments: targets)
    func aFailCaseNeverCrashesAgain(target: String) async throws {
        let process = Process()
        process.executableURL = TestPaths.binaries.appending(path: "receipt-fuzz")
        process.arguments = [Self.failCases.appending(path: target).path]
        process.environment = ProcessInfo.processInfo.environment.merging(["RR_FUZZ_TARGET": target]) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(target): \(text.suffix(2000))")
        let count = try FileManager.default.contentsOfDirectory(atPath: Self.failCases.appending(path: target).path).count
        #expect(text.contains("\(target): replayed \(count) input(s), none crashed"), "\(text.suffix(500))")
    }
}
