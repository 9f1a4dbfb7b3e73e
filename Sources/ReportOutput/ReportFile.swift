import Foundation

/// A report or export file written aside as `.name.RANDOM.partial` and renamed into place (rename(2):
/// atomic, replacing an older file of the same name) once whole and flushed to the disk.
///
/// Reports hold account ids and money: the partial file is created new (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`, so a symlink planted under its name is never followed into another file) with
/// mode 0640 whatever the umask (no group write, no world access); rename(2) replaces a symlink
/// at the final name rather than writing through it.
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
        let unique = String(UInt64.random(in: 0...UInt64.max), radix: 36)
        temporary = url.deletingLastPathComponent().appending(path: ".\(url.lastPathComponent).\(unique).partial")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, Self.mode)
        guard descriptor >= 0 else {
            throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
        handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            // The umask can only take bits away; an fchmod makes the mode exactly 0640.
            guard fchmod(descriptor, Self.mode) == 0 else {
                throw ReportError(description: "cannot write \(url.path): \(String(cString: strerror(errno)))")
            }
            buffer = header
            try flush()
        } catch {
            discard()
            throw error is ReportError ? error : failure(error)
        }
    }

    /// Owner read and write, group read, nothing for others.
    public static let mode: mode_t = 0o640

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

/// A file being written belongs to the task that writes it: its buffer and descriptor are
/// never shared (`RunReportWriter` says how a run hands its files from one task to the next).
@available(*, unavailable)
extension ReportFile: Sendable {}
