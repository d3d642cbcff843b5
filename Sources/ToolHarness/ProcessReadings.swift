// What the benchmark and the soak read about their own process and the machine, from /proc.
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Readings of this process and of the machine's load, from `/proc`; each is 0 or "unknown" where
/// the file cannot be read.
public enum ProcessReadings {
    private static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// The process's resident set in bytes: the second field of `/proc/self/statm`, in pages.
    ///
    /// Read with `open`/`read` into a small buffer, so that a reading taken around a measurement
    /// of the heap makes no Foundation objects.
    public static func residentBytes() -> Int {
        let fd = open("/proc/self/statm", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let length = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard length > 0 else { return 0 }
        let fields = buffer[..<length].split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * pageSize
    }

    /// The number of threads of this process (`Threads:` of `/proc/self/status`).
    public static func threadCount() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("Threads:") {
            return Int(line.dropFirst("Threads:".count).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        return 0
    }

    /// The three load averages of `/proc/loadavg` (1, 5 and 15 minutes), e.g. "0.12 0.30 0.25".
    public static func loadAverage() -> String {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "unknown" }
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    /// The `some` line of `/proc/pressure/cpu` without its total, e.g. "some avg10=0.00 avg60=1.20
    /// avg300=0.80": the share of time runnable threads waited for a core.
    public static func cpuPressure() -> String {
        guard let text = try? String(contentsOfFile: "/proc/pressure/cpu", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("some") }) else { return "unavailable" }
        return line.split(separator: " ").filter { !$0.hasPrefix("total=") }.joined(separator: " ")
    }
}
