// log.disabled: the cost of a log call on a source that is switched off.
import Foundation
import ThreadKit
import ToolHarness

/// The source the benchmark logs to, named at run time so that the optimizer cannot know it, nor
/// that it is disabled: `$THREADKIT_BENCH_LOG_SOURCE`, or the program's name.
let benchLogSource = Log.Source(
    ProcessInfo.processInfo.environment["THREADKIT_BENCH_LOG_SOURCE"]
        ?? "bench:" + (CommandLine.arguments.first ?? "threadkit-bench"))

/// `log.disabled`: what a log call on a disabled source costs.
enum LogWorkloads {
    /// `log.disabled`: a hundred million `Log.log` calls whose message interpolates the loop index.
    static func disabled(scale: Scale) -> Workload {
        let calls = scale.size(100_000_000)
        return Workload(
            id: "log.disabled", metrics: [Metric(name: "per call", unit: "ns")],
            contenders: [
                Contender(name: "ThreadKit") {
                    let source = benchLogSource
                    Log.disable(source)
                    precondition(!Log.isEnabled(source), "the benchmark's log source must be off")
                    let start = ContinuousClock.now
                    logDisabled(source, calls: calls)
                    let elapsed = ContinuousClock.now - start
                    return Measurement(values: ["per call": elapsed.nanoseconds / Double(calls)])
                }
            ])
    }

    /// The timed loop; not inlined, so the source arrives as an opaque argument.
    @inline(never)
    static func logDisabled(_ source: Log.Source, calls: Int) {
        for index in 0..<calls {
            Log.log(source, "request \(index) finished")
        }
    }
}
