// The machine a run was made on, for the JSON and the markdown.
import Foundation
import Glibc
import ToolHarness

/// The machine a run was made on, and how busy it was.
struct Machine: Codable {
    let cpu: String
    let cores: Int
    let memoryBytes: UInt64
    let kernel: String
    let swift: String
    let build: String
    /// The ThreadKit that was measured: `$THREADKIT_BENCH_REVISION` if set (for a build from an
    /// exported tree), else `git describe --always --dirty` of the working directory ("-dirty" when
    /// it had uncommitted changes). Read at run time, so run right after building.
    let revision: String
    let date: String
    /// `/proc/loadavg` (1, 5 and 15 minutes) when the run started and when it ended: other work on
    /// the machine shows here.
    let loadAverageAtStart: String
    var loadAverageAtEnd: String?
    /// `/proc/pressure/cpu` ("some avg10=… avg60=… avg300=…") when the run started and ended: the
    /// share of time runnable threads waited for a core.
    let cpuPressureAtStart: String
    var cpuPressureAtEnd: String?

    static func current() -> Machine {
        Machine(
            cpu: cpuModel(), cores: ProcessInfo.processInfo.activeProcessorCount,
            memoryBytes: ProcessInfo.processInfo.physicalMemory, kernel: kernel(),
            swift: swiftVersion, build: build, revision: gitRevision(),
            date: ISO8601DateFormatter().string(from: Date()), loadAverageAtStart: ProcessReadings.loadAverage(),
            cpuPressureAtStart: ProcessReadings.cpuPressure())
    }

    private static func gitRevision() -> String {
        if let revision = ProcessInfo.processInfo.environment["THREADKIT_BENCH_REVISION"], !revision.isEmpty {
            return revision
        }
        let git = Process()
        git.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        git.arguments = ["git", "describe", "--always", "--dirty"]
        let output = Pipe()
        git.standardOutput = output
        git.standardError = FileHandle.nullDevice
        do {
            try git.run()
        } catch {
            return "unknown"
        }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        git.waitUntilExit()
        return git.terminationStatus == 0 && !text.isEmpty ? text : "unknown"
    }

    /// "16.0 GiB".
    var memoryText: String { String(format: "%.1f GiB", Double(memoryBytes) / Double(1 << 30)) }

    /// The first `model name` of `/proc/cpuinfo`.
    private static func cpuModel() -> String {
        guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in info.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
    }

    /// `uname -sr -m`, e.g. "Linux 6.8.0 x86_64".
    private static func kernel() -> String {
        var names = utsname()
        guard uname(&names) == 0 else { return "unknown" }
        func text<T>(_ field: inout T) -> String {
            withUnsafeBytes(of: &field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        return "\(text(&names.sysname)) \(text(&names.release)) \(text(&names.machine))"
    }

    /// The compiler the benchmark was built with, as far as `#if compiler` can tell.
    private static var swiftVersion: String {
        #if compiler(>=7.0)
        "7.0 or later"
        #elseif compiler(>=6.5)
        "6.5"
        #elseif compiler(>=6.4)
        "6.4"
        #elseif compiler(>=6.3)
        "6.3"
        #elseif compiler(>=6.2)
        "6.2"
        #else
        "before 6.2"
        #endif
    }

    private static var build: String {
        #if DEBUG
        "debug"
        #else
        "release"
        #endif
    }
}
