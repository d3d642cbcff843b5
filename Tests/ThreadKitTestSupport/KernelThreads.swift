// What the Linux kernel reports about this process's threads, for tests that count threads or
// measure the CPU a thread used.
//
// Swift Testing runs suites in parallel in one process, so process-wide facts (thread counts, CPU
// time) are measured per thread: threads are told apart by their kernel name (give every pool or
// timer a short name of its own), and CPU time is read from inside the thread that used it.

import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// This process's threads as the Linux kernel reports them under `/proc/self/task`.
public enum KernelThreads {
    /// The kernel id (tid) of the calling thread.
    public static func currentID() -> Int32 {
        // "/proc/thread-self" links to "<pid>/task/<tid>" of the thread that reads it.
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        precondition(length > 0, "cannot read /proc/thread-self")
        let target = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return Int32(target.split(separator: "/").last!)!
    }

    /// The kernel ids of every thread alive in this process.
    public static func ids() -> [Int32] {
        guard let directory = opendir("/proc/self/task") else { return [] }
        defer { closedir(directory) }
        var result: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if let id = Int32(name) { result.append(id) }
        }
        return result
    }

    /// The kernel name (`comm`, at most 15 bytes) of thread `id`, or `nil` if it has exited.
    public static func name(ofThread id: Int32) -> String? {
        guard let text = readProcFile("/proc/self/task/\(id)/comm") else { return nil }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    /// The calling thread's kernel name.
    public static func currentName() -> String {
        name(ofThread: currentID()) ?? ""
    }

    /// The kernel names of every thread alive in this process.
    public static func names() -> [String] {
        ids().compactMap { name(ofThread: $0) }
    }

    private static let uniqueNames = Atomic<Int>(0)

    /// A thread name no other test uses: `prefix` and a fresh number, within the 15 bytes the kernel keeps.
    public static func uniqueName(_ prefix: String) -> String {
        let number = uniqueNames.add(1, ordering: .relaxed).newValue
        let name = "\(prefix)\(String(number, radix: 36))"
        precondition(name.utf8.count <= 15, "thread name \(name) is longer than the kernel keeps")
        return name
    }

    /// The ids of the live threads whose kernel name starts with `prefix`.
    public static func ids(withPrefix prefix: String) -> [Int32] {
        ids().filter { name(ofThread: $0)?.hasPrefix(prefix) ?? false }
    }

    /// The ids of the live threads whose kernel name is `name` exactly (a prefix search for one
    /// unique name would also find `<name>a`, a unique name made later from the same prefix).
    public static func ids(named name: String) -> [Int32] {
        ids().filter { self.name(ofThread: $0) == name }
    }

    /// How many live threads have a kernel name that starts with `prefix`.
    public static func count(withPrefix prefix: String) -> Int {
        ids(withPrefix: prefix).count
    }

    /// Whether thread `id` is asleep in the kernel (state `S`: blocked in a wait, a lock, a sleep),
    /// from `/proc/self/task/<id>/stat`; `false` once it has exited. For a test that must act only
    /// once another thread has blocked where it was heading, instead of sleeping and hoping.
    public static func isSleeping(_ id: Int32) -> Bool {
        // The state follows the name, which is in parentheses and may itself hold ") ".
        guard let stat = readProcFile("/proc/self/task/\(id)/stat"),
              let nameEnd = stat.range(of: ") ", options: .backwards) else { return false }
        return stat[nameEnd.upperBound...].first == "S"
    }

    /// The context switches thread `id` has made so far, from `/proc/self/task/<id>/status`.
    public static func contextSwitches(ofThread id: Int32) -> (voluntary: Int, involuntary: Int)? {
        guard let status = readProcFile("/proc/self/task/\(id)/status") else { return nil }
        var voluntary: Int?
        var involuntary: Int?
        for line in status.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let value = Int(parts[1].trimmingCharacters(in: .whitespaces))
            if parts[0] == "voluntary_ctxt_switches" { voluntary = value }
            if parts[0] == "nonvoluntary_ctxt_switches" { involuntary = value }
        }
        guard let voluntary, let involuntary else { return nil }
        return (voluntary, involuntary)
    }

    private static func readProcFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(descriptor, &chunk, chunk.count)
            if count < 0 { return nil }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The calling thread's own CPU time and context switches (`getrusage(RUSAGE_THREAD)`).
///
/// Read it twice from inside the same thread; the difference is what that thread alone used,
/// whatever the other tests running in parallel do.
public struct ThreadUsage: Sendable {
    /// User plus system CPU time.
    public var cpuTime: Duration
    /// Times the thread gave up the CPU to wait (blocking, sleeping).
    public var voluntarySwitches: Int
    /// Times the scheduler took the CPU away.
    public var involuntarySwitches: Int

    public init(cpuTime: Duration, voluntarySwitches: Int, involuntarySwitches: Int) {
        self.cpuTime = cpuTime
        self.voluntarySwitches = voluntarySwitches
        self.involuntarySwitches = involuntarySwitches
    }

    /// The calling thread's usage so far.
    public static func current() -> ThreadUsage {
        var usage = rusage()
        let result = getrusage(__rusage_who_t(1), &usage)  // 1 is RUSAGE_THREAD, hidden behind _GNU_SOURCE
        precondition(result == 0, "getrusage(RUSAGE_THREAD) failed")
        func duration(_ time: timeval) -> Duration {
            .seconds(Int64(time.tv_sec)) + .microseconds(Int64(time.tv_usec))
        }
        return ThreadUsage(
            cpuTime: duration(usage.ru_utime) + duration(usage.ru_stime),
            voluntarySwitches: Int(usage.ru_nvcsw), involuntarySwitches: Int(usage.ru_nivcsw))
    }
}

/// Whether this process runs under the thread sanitizer (its runtime is linked in).
public let threadSanitized = dlsym(nil, "__tsan_init") != nil
