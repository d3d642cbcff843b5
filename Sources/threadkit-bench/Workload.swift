// What a workload is, and the loop that runs it: a warm-up, then repetitions, with the
// implementations taking turns inside each repetition so that drift in the machine's state
// (frequency, other load) falls on all of them alike.
import Foundation

/// One number a workload reports, e.g. "wall per item" in "ns".
struct Metric {
    let name: String
    let unit: String

    /// Whether the metric counts events (formatted as a whole number).
    var isCount: Bool { unit == "count" }
}

/// What one run of one implementation measured.
struct Measurement {
    /// The value of each of the workload's metrics, by metric name.
    var values: [String: Double] = [:]
    /// The raw samples behind a latency metric (µs), for the charts.
    var samples: [Double] = []

    subscript(metric: String) -> Double? {
        get { values[metric] }
        set { values[metric] = newValue }
    }

    /// Adds `<prefix> p50`, `<prefix> p99` and `<prefix> max` from `samples`, and keeps the samples.
    mutating func addLatencyPercentiles(_ prefix: String, samples: [Double]) {
        let distribution = Distribution(samples)
        values["\(prefix) p50"] = distribution.percentile(50)
        values["\(prefix) p99"] = distribution.percentile(99)
        values["\(prefix) max"] = distribution.max
        self.samples = samples
    }
}

/// One implementation taking part in a workload.
struct Contender {
    /// `ThreadKit`, `GCD`, `OperationQueue`, `GCD asyncAfter`, `DispatchSourceTimer`, `GCD chain` or `sleep`.
    let name: String
    /// Runs the workload once and returns what it measured.
    let run: () throws -> Measurement
}

/// A workload: the same work done by each contender, measured the same way.
struct Workload {
    /// The id from the benchmark's specification, e.g. `pool.throughput.p1`.
    let id: String
    let metrics: [Metric]
    var contenders: [Contender]
    /// Releases what the workload made (pools, timers), after the last repetition.
    var finish: () -> Void = {}
}

/// Run sizes: full, or a tenth for CI.
struct Scale {
    let isQuick: Bool
    let warmUps = 1
    let repetitions = 5

    /// `full`, or a tenth of it in quick mode.
    func size(_ full: Int) -> Int { isQuick ? full / 10 : full }
}

/// Every repetition's measurements of one contender.
struct ContenderResult {
    let name: String
    /// Per metric name, one value per measured repetition.
    var values: [String: [Double]] = [:]
    /// Raw latency samples, one array per measured repetition.
    var samples: [[Double]] = []
}

/// A workload's results, contenders in the order they were listed.
struct WorkloadResult {
    let id: String
    let metrics: [Metric]
    let contenders: [ContenderResult]
}

/// Runs `workload`: `scale.warmUps` unrecorded rounds, then `scale.repetitions` recorded ones. Each
/// round runs every contender once, in order.
func run(_ workload: Workload, scale: Scale, log: (String) -> Void) throws -> WorkloadResult {
    defer { workload.finish() }
    var results = workload.contenders.map { ContenderResult(name: $0.name) }
    let rounds = scale.warmUps + scale.repetitions
    for round in 0..<rounds {
        let isWarmUp = round < scale.warmUps
        for (index, contender) in workload.contenders.enumerated() {
            let started = ContinuousClock.now
            let measurement = try contender.run()
            let label = isWarmUp ? "warm-up" : "repetition \(round - scale.warmUps + 1)/\(scale.repetitions)"
            log("\(workload.id) \(contender.name) \(label): \(describe(measurement, workload.metrics)) (\(elapsed(since: started)))")
            guard !isWarmUp else { continue }
            for metric in workload.metrics {
                if let value = measurement[metric.name] { results[index].values[metric.name, default: []].append(value) }
            }
            if !measurement.samples.isEmpty { results[index].samples.append(measurement.samples) }
        }
    }
    return WorkloadResult(id: workload.id, metrics: workload.metrics, contenders: results)
}

private func describe(_ measurement: Measurement, _ metrics: [Metric]) -> String {
    metrics.compactMap { metric in
        measurement[metric.name].map { "\(metric.name) \(Format.value($0, metric)) \(metric.unit)" }
    }.joined(separator: ", ")
}

private func elapsed(since start: ContinuousClock.Instant) -> String {
    String(format: "%.1f s", (ContinuousClock.now - start).nanoseconds / 1e9)
}
