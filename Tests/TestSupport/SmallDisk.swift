import Foundation

/// A tmpfs of a few kilobytes mounted for one test: a disk that really fills up, with the kernel's
/// own ENOSPC. Mounting needs root, or a user with passwordless sudo (CI is one or the other);
/// elsewhere `isAvailable` is false.
public final class SmallDisk: @unchecked Sendable {
    // Set once in init.
    public let directory: URL

    /// How mount and umount run: as they are for root, through `sudo -n` for a user who may;
    /// nil when neither works.
    public static let privilege: [String]? = {
        if getuid() == 0 { return [] }
        let sudo = Process()
        sudo.executableURL = URL(filePath: "/usr/bin/sudo")
        sudo.arguments = ["-n", "true"]
        sudo.standardError = FileHandle.nullDevice
        guard (try? sudo.run()) != nil else { return nil }
        sudo.waitUntilExit()
        return sudo.terminationStatus == 0 ? ["/usr/bin/sudo", "-n"] : nil
    }()

    public static let isAvailable: Bool = {
        guard let disk = try? SmallDisk(kilobytes: 16) else { return false }
        disk.unmount()
        return true
    }()

    static func privileged(_ command: String, _ arguments: [String]) -> Process {
        let process = Process()
        let prefix = privilege ?? []
        process.executableURL = URL(filePath: prefix.first ?? command)
        process.arguments = Array(prefix.dropFirst()) + (prefix.isEmpty ? [] : [command]) + arguments
        return process
    }

    public init(kilobytes: Int) throws {
        directory = FileManager.default.temporaryDirectory.appending(path: "rr-small-disk-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        guard Self.privilege != nil else {
            try? FileManager.default.removeItem(at: directory)
            throw TestSetupError(description: "cannot mount a tmpfs: neither root nor passwordless sudo")
        }
        // Owned by the user the tests run as, whoever mounts it.
        let process = Self.privileged("/bin/mount", ["-t", "tmpfs", "-o", "size=\(kilobytes)k,uid=\(getuid()),gid=\(getgid()),mode=0700",
                                                     "tmpfs", directory.path])
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            try? FileManager.default.removeItem(at: directory)
            throw TestSetupError(description: "cannot mount a tmpfs at \(directory.path) (not root?)")
        }
    }

    /// Fills the disk to the last byte.
    public func fill() {
        let path = directory.appending(path: "filler").path
        guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path)
        else { return }
        let block = Data(count: 4096)
        while (try? handle.write(contentsOf: block)) != nil {}
        let byte = Data(count: 1)
        while (try? handle.write(contentsOf: byte)) != nil {}
        try? handle.close()
    }

    public func free() {
        try? FileManager.default.removeItem(at: directory.appending(path: "filler"))
    }

    /// Names in the directory tree, relative to it: what a test expects to find or not find.
    public func files() -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: directory.path)
        var names: [String] = []
        while let name = enumerator?.nextObject() as? String { names.append(name) }
        return names.sorted()
    }

    public func unmount() {
        let process = Self.privileged("/bin/umount", [directory.path])
        try? process.run()
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }
}
