// How a run is made: every round of every contender in a fresh process (the benchmark runs
// itself with `--child WORKLOAD --implementation NAME`), rounds in rotated contender order, so that
// no workload and no contender runs in the state another one left behind.
import Foundation
import ToolHarness

/// Runs workloads, one process per contender and round, and collects what they measured.
struct Runner {
    let options: Options
    let scale: Scale
    let log: (String) -> Void

    /// The path of this program, to run it again.
    static let executable: String = {
        let path = CommandLine.arguments[0]
        if path.contains("/") { return URL(fileURLWithPath: path).standardizedFileURL.path }
        return Bundle.main.executablePath ?? path
    }()

    /// Runs `scale.rounds(for:)` rounds of `workload` (only its id and contender names are used
    /// here). In round `r` the contenders start with the one at `r mod n`.
    func run(_ workload: Workload) throws -> WorkloadResult {
        let started = ContinuousClock.now
        let names = workload.contenders.map(\.name)
        var results = names.map { ContenderResult(name: $0) }
        let rounds = scale.rounds(for: workload.id)
        for round in 0..<rounds {
            let order = (0..<names.count).map { (round + $0) % names.count }
            if workload.contendersRunTogether {
                let children = try order.map { try startChild(workload.id, names[$0], round: round) }
                for (index, child) in zip(order, children) {
                    results[index].rounds.append(try child.finish())
                }
            } else {
                for index in order {
                    let measurement = try startChild(workload.id, names[index], round: round).finish()
                    results[index].rounds.append(measurement)
                }
            }
            let summary = order.map { index in
                "\(names[index]) \(Self.describe(results[index].rounds.last!, workload.metrics))"
            }.joined(separator: "; ")
            log("\(workload.id) round \(round + 1)/\(rounds): \(summary)")
        }
        var result = WorkloadResult(id: workload.id, metrics: workload.metrics, contenders: results)
        result.seconds = (ContinuousClock.now - started).seconds
        log(String(format: "%@ done in %.1f s", workload.id, result.seconds))
        return result
    }

    private func startChild(_ workload: String, _ implementation: String, round: Int) throws -> Child {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        var arguments = ["--child", workload, "--implementation", implementation, "--round", String(round)]
        if scale.isQuick { arguments.append("--quick") }
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        try process.run()
        // A child that hangs (a lost wake-up in the code measured) is killed, and the workload
        // fails, rather than the run waiting for ever.
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.childTimeout.dispatchInterval, execute: watchdog)
        return Child(
            process: process, output: output, watchdog: watchdog,
            label: "\(workload) \(implementation) round \(round + 1)")
    }

    /// How long one child may run: ten times the longest round of a full run.
    static let childTimeout = Duration.seconds(300)

    /// A running child process and the pipe its measurement arrives on.
    private struct Child {
        let process: Process
        let output: Pipe
        /// Kills the child when it runs past ``Runner/childTimeout``; cancelled once it has exited.
        let watchdog: DispatchWorkItem
        let label: String

        /// A child that failed, or printed no measurement.
        struct Failure: Error, CustomStringConvertible {
            let description: String
        }

        /// Waits for the child and decodes its measurement (the last line of its standard output that
        /// starts with ``Runner/measurementMarker``).
        func finish() throws -> Measurement {
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            watchdog.cancel()
            guard process.terminationReason == .exit else {
                let killed = process.terminationStatus == SIGKILL ? " (killed after \(Runner.childTimeout))" : ""
                throw Failure(description: "\(label) ended by signal \(process.terminationStatus)\(killed)")
            }
            guard process.terminationStatus == 0 else {
                throw Failure(description: "\(label) exited with status \(process.terminationStatus)")
            }
            let marker = Array(Runner.measurementMarker.utf8)
            let line = data.split(separator: UInt8(ascii: "\n")).last { $0.starts(with: marker) }
            do {
                return try JSONDecoder().decode(Measurement.self, from: Data(line?.dropFirst(marker.count) ?? Data()))
            } catch {
                throw Failure(description: "\(label) wrote no measurement: \(error)")
            }
        }
    }

    /// What starts the line a child prints its measurement on.
    static let measurementMarker = "threadkit-bench measurement: "

    static func describe(_ measurement: Measurement, _ metrics: [Metric]) -> String {
        metrics.compactMap { metric in
            measurement[metric.name].map { "\(metric.name) \(Format.value($0, metric))" }
        }.joined(separator: ", ")
    }

    /// The child's side: runs one round of one contender of `workload` in this process (its warm-up
    /// first) and writes the measurement to standard output as JSON.
    static func runChild(_ workload: Workload, implementation: String) throws {
        defer { workload.finish() }
        guard let contender = workload.contenders.first(where: { $0.name == implementation }) else {
            throw Child.Failure(description: "\(workload.id) has no contender '\(implementation)'")
        }
        try contender.warmUp?()
        let measurement = try contender.run()
        // On a line of its own that starts with the marker, whatever else the process prints.
        let data = try JSONEncoder().encode(measurement)
        print("\n" + Self.measurementMarker + String(decoding: data, as: UTF8.self))
        fflush(nil)
    }
}
