// threadkit-bench: ThreadKit against Dispatch and OperationQueue, workload by workload.
//
//   threadkit-bench                  full run; from the package root it also rewrites Docs/benchmarks.md
//   threadkit-bench --quick          a tenth of the sizes, for CI
//   threadkit-bench --only pool.     a subset while developing
import Foundation

/// Every workload, in the order of the specification (and of the report).
let workloads: [(id: String, make: (Scale) -> Workload)] = [
    ("pool.throughput.p1", { PoolWorkloads.throughput(scale: $0, producers: 1) }),
    ("pool.throughput.p2", { PoolWorkloads.throughput(scale: $0, producers: 2) }),
    ("pool.schedule.p1", PoolWorkloads.schedule),
    ("pool.wake", PoolWorkloads.wake),
    ("timer.fire", TimerWorkloads.fire),
    ("timer.pending", TimerWorkloads.pending),
    ("throttle.precision", ThrottleWorkloads.precision),
    ("log.disabled", LogWorkloads.disabled),
    ("dedicated.throughput", DispatchWorkloads.dedicatedThroughput),
    ("dedicated.sync", DispatchWorkloads.dedicatedSync),
    ("dispatch.sync.held", DispatchWorkloads.syncWhileHolding),
]

/// `timer.pending` runs last: GCD keeps its cancelled calls until their deadline, an hour away,
/// and they must not weigh on the other workloads.
let runsLast: Set = ["timer.pending"]

func progress(_ message: String) {
    FileHandle.standardError.write(Data("[bench] \(message)\n".utf8))
}

let options: Options
do {
    options = try Options.parse(CommandLine.arguments.dropFirst())
} catch {
    if !error.description.isEmpty { progress(error.description) }
    print(Options.usage)
    exit(error.description.isEmpty ? 0 : 2)
}

let scale = Scale(isQuick: options.isQuick)
let selected = workloads.filter { options.selects($0.id) }
guard !selected.isEmpty else {
    progress("no workload id starts with \(options.only.joined(separator: " or "))")
    exit(2)
}
let executionOrder = selected.filter { !runsLast.contains($0.id) } + selected.filter { runsLast.contains($0.id) }

var markdownPath = options.markdownPath
var svgDirectory = options.svgDirectory ?? markdownPath.map { ($0 as NSString).deletingLastPathComponent }
if !options.isQuick, options.only.isEmpty, options.implementations.isEmpty, markdownPath == nil, svgDirectory == nil, options.writesDocsByDefault {
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
progress("\(options.isQuick ? "quick" : "full") run on \(machine.cpu), \(machine.cores) cores, \(machine.kernel), load \(machine.loadAverageAtStart)")
let started = ContinuousClock.now

let countingCost = Calibration.countingCost(ticks: scale.size(2_000_000))
progress(String(format: "completion counting alone: %.1f ns per tick (two threads, one counter)", countingCost))

var results: [String: WorkloadResult] = [:]
do {
    for (id, make) in executionOrder {
        var workload = make(scale)
        workload.contenders.removeAll { !options.selects(implementation: $0.name) }
        guard !workload.contenders.isEmpty else { continue }
        results[id] = try run(workload, scale: scale, log: progress)
    }
} catch {
    progress("a workload failed: \(error)")
    exit(1)
}
let ordered = selected.compactMap { results[$0.id] }
machine.loadAverageAtEnd = Machine.loadAverage()
progress(String(format: "done in %.0f s", (ContinuousClock.now - started).nanoseconds / 1e9))

let report = Report(
    machine: machine, isQuick: options.isQuick, scale: scale,
    command: options.measuringCommand,
    rows: ordered.flatMap(Row.rows), countingCost: countingCost)
print(report.table())

do {
    if let jsonPath = options.jsonPath {
        try report.json().write(to: URL(fileURLWithPath: jsonPath))
        progress("wrote \(jsonPath)")
    }
    var charts: [(caption: String, path: String)] = []
    if let svgDirectory {
        let files = ChartFiles.render(ordered, repetitions: scale.repetitions)
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
