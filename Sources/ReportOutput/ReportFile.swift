import Foundation

/// A report or export file written aside as `.name.partial` and renamed into place (rename(2):
/// atomic, replacing an older file of the same name) once whole and flushed to the disk.
/// Writes are buffered 64 KB at a time; every failure (a full disk) names the file the reader
/// expects and the operating system's reason, and `commit` leaves no partial file when it fails.
public final class ReportFile {
    public let url: URL
    private let temporary: URL
    private var handle: FileHandle?
    private var buffer = ""

    /// Creates the partial file and writes `header` through at once, so a full disk shows now.
    public init(_ url: URL, header: String = "") throws {
        self.url = url
        temporary = url.deletingLastPathComponent().appending(path: "." + url.lastPathComponent + ".partial")
        guard FileManager.default.createFile(atPath: temporary.path, contents: nil) else {
            throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
        do {
            handle = try FileHandle(forWritingTo: temporary)
            buffer = header
            try flush()
        } catch {
            discard()
            throw error is ReportError ? error : failure(error)
        }
    }

    public func write(_ text: String) throws {
        buffer += text
        if buffer.utf8.count >= 1 << 16 { try flush() }
    }

    /// Writes what is buffered to the file.
    public func flush() throws {
        guard !buffer.isEmpty, let handle else { return }
        do {
            try handle.write(contentsOf: Data(buffer.utf8))
        } catch {
            throw failure(error)
        }
        buffer = ""
    }

    /// Flushes to the disk (so a full disk shows here, not after the rename) and renames into place.
    public func commit() throws {
        do {
            try flush()
            do {
                try handle?.synchronize()
                try handle?.close()
                handle = nil
            } catch {
                throw failure(error)
            }
            guard rename(temporary.path, url.path) == 0 else {
                throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
            }
        } catch {
            discard()
            throw error
        }
    }

    /// Closes and removes the partial file.
    public func discard() {
        try? handle?.close()
        handle = nil
        unlink(temporary.path)
    }

    private func failure(_ error: any Error) -> ReportError {
        ReportError(description: "cannot write \(url.path): \(Self.reason(error))")
    }

    /// The operating system's words for a failure ("No space left on device"), not Foundation's wrapper.
    public static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        if nsError.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(nsError.code))) }
        return error.localizedDescription
    }
}

/// A report or export file could not be written (full disk, no permission): says which file.
public struct ReportError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}
