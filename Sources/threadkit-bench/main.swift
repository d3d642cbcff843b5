// threadkit-bench: ThreadKit against Dispatch and OperationQueue, workload by workload.
//
//   threadkit-bench                  full run; from the package root it also rewrites Docs/benchmarks.md
//   threadkit-bench --quick          a tenth of the sizes and 3 rounds, for CI
//   threadkit-bench --only pool.     a subset while developing
//   threadkit-bench --self-test      checks the statistics
import Foundation
import RedisFleet
import ToolHarness

func progress(_ message: String) {
    FileHandle.standardError.write(Data("[bench] \(message)\n".utf8))
}

// A member of redis.fleet's fleet (this program again, its plan in the environment): its tasks, then exit.
if let plan = FleetMember.plan {
    do {
        try FleetMember.run(plan)
        exit(0)
    } catch {
        progress("fleet member \(plan.member) failed: \(error)")
        exit(1)
    }
}

let options = Options.parseOrExit(report: progress)

if options.runsSelfTest {
    let failures = StatsSelfTest.run()
    for failure in failures { progress("self-test failed: \(failure)") }
    print(failures.isEmpty ? "threadkit-bench self-test: all statistics checks pass" : "threadkit-bench self-test: \(failures.count) failures")
    exit(failures.isEmpty ? 0 : 1)
}
if options.listsWorkloads {
    for entry in Catalogue.workloads { print(entry.id) }
    exit(0)
}

let scale = Scale(isQuick: options.isQuick, rounds: options.rounds)

// A child: one round of one contender, its measurement on standard output.
if let id = options.child {
    guard let entry = Catalogue.workloads.first(where: { $0.id == id }), let implementation = options.implementations.first else {
        progress("--child needs a known workload and one --implementation")
        exit(2)
    }
    do {
        try Runner.runChild(entry.make(scale), implementation: implementation)
    } catch {
        progress("\(id) \(implementation) failed: \(error)")
        exit(1)
    }
    exit(0)
}

let selected = Catalogue.workloads.filter { options.selects($0.id) }
guard !selected.isEmpty else {
    progress("no workload id starts with \(options.only.joined(separator: " or "))")
    exit(2)
}

var markdownPath = options.markdownPath
var svgDirectory = options.svgDirectory ?? markdownPath.map { ($0 as NSString).deletingLastPathComponent }
if !options.isQuick, options.only.isEmpty, options.implementations.isEmpty, options.rounds == nil,
   markdownPath == nil, svgDirectory == nil, options.writesDocsByDefault {
    var isDirectory: ObjCBool = false
    if FileManager.default.fileExists(atPath: "Package.swift"),
       FileManager.default.fileExists(atPath: "Docs", isDirectory: &isDirectory), isDirectory.boolValue {
        markdownPath = "Docs/benchmarks.md"
        svgDirectory = "Docs"
    }
}

#if DEBUG
progress("warning: a debug build; measure with `swift build -c release`")
#endif
var machine = Machine.current()
progress("\(options.isQuick ? "quick" : "full") run, \(scale.rounds) rounds, on \(machine.cpu), \(machine.cores) cores, "
    + "\(machine.kernel), load \(machine.loadAverageAtStart), cpu pressure \(machine.cpuPressureAtStart)")
let started = ContinuousClock.now

let runner = Runner(options: options, scale: scale, log: progress)
var results: [WorkloadResult] = []
// A workload whose child fails or hangs is reported and left out; the others still run.
var failures: [String] = []
for entry in selected {
    if entry.id.hasPrefix("redis."), RedisAvailability.executable == nil {
        progress("\(entry.id) skipped: \(RedisAvailability.skipReason) to measure the shared limits")
        continue
    }
    var workload = entry.make(scale)
    defer { workload.finish() }
    workload.contenders.removeAll { !options.selects(implementation: $0.name) }
    guard !workload.contenders.isEmpty else { continue }
    do {
        results.append(try runner.run(workload))
    } catch {
        progress("\(entry.id) failed, left out: \(error)")
        failures.append("\(entry.id): \(error)")
    }
}
machine.loadAverageAtEnd = ProcessReadings.loadAverage()
machine.cpuPressureAtEnd = ProcessReadings.cpuPressure()
progress(String(format: "done in %.0f s", (ContinuousClock.now - started).seconds))

var rows = results.flatMap(Row.rows)
Row.addFloors(&rows)
let report = Report(
    machine: machine, isQuick: options.isQuick, scale: scale, command: options.measuringCommand,
    rows: rows, seconds: results.map { ($0.id, $0.seconds) }, failures: failures)
print(report.table())

do {
    if let jsonPath = options.jsonPath {
        try report.json().write(to: URL(fileURLWithPath: jsonPath))
        progress("wrote \(jsonPath)")
    }
    var charts: [(caption: String, path: String)] = []
    if let svgDirectory {
        let files = ChartFiles.render(results, rows: rows, scale: scale)
        try FileManager.default.createDirectory(atPath: svgDirectory, withIntermediateDirectories: true)
        for file in files {
            let path = (svgDirectory as NSString).appendingPathComponent(file.name)
            try file.svg.write(toFile: path, atomically: true, encoding: .utf8)
            progress("wrote \(path)")
            let markdownDirectory = markdownPath.map { ($0 as NSString).deletingLastPathComponent } ?? ""
            let relative = (svgDirectory as NSString).standardizingPath == (markdownDirectory as NSString).standardizingPath
                ? file.name : (URL(fileURLWithPath: path).standardizedFileURL.path)
            charts.append((file.caption, relative))
        }
    }
    if let markdownPath {
        try report.writeMarkdown(to: markdownPath, charts: charts)
        progress("wrote \(markdownPath)")
    }
} catch {
    progress("could not write the results: \(error)")
    exit(1)
}
if !failures.isEmpty {
    for failure in failures { progress("failed: \(failure)") }
    exit(1)
}
