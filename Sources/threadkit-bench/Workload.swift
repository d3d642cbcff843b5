// What a workload is: the metrics it reports, and the contenders that each do the same work.
// Every contender's round runs in a process of its own (see Runner.swift).
import Foundation

/// One number a workload reports, e.g. "wall per item" in "ns".
struct Metric {
    let name: String
    let unit: String
    /// For a percentile of a latency distribution: the sample set's name and the percentile
    /// (100 for the maximum). The report pools these samples over every round.
    var percentileOf: (samples: String, percent: Double)?

    init(name: String, unit: String) {
        self.name = name
        self.unit = unit
    }

    /// The metrics `<samples> p50`, `<samples> p99` and `<samples> max` of a latency distribution.
    static func percentiles(_ samples: String, unit: String = "µs") -> [Metric] {
        [("p50", 50.0), ("p99", 99.0), ("max", 100.0)].map { label, percent in
            var metric = Metric(name: "\(samples) \(label)", unit: unit)
            metric.percentileOf = (samples, percent)
            return metric
        }
    }

    /// Metrics by name, each with the unit beside it, in order.
    static func named(_ units: KeyValuePairs<String, String>) -> [Metric] {
        units.map { Metric(name: $0.key, unit: $0.value) }
    }

    /// Whether the metric counts events (formatted as a whole number).
    var isCount: Bool { unit == "count" }
}

/// What one round of one contender measured: what a child process hands back to the runner.
struct Measurement: Codable {
    /// The value of each of the workload's metrics, by metric name.
    var values: [String: Double] = [:]
    /// Raw latency samples by sample-set name (e.g. "lateness"), pooled over rounds by the report.
    var samples: [String: [Double]] = [:]

    subscript(metric: String) -> Double? {
        get { values[metric] }
        set { values[metric] = newValue }
    }

    /// Keeps `samples` as the set `name` and adds this round's `<name> p50`, `p99` and `max`.
    mutating func addLatencyPercentiles(_ name: String, samples: [Double]) {
        let distribution = Distribution(samples)
        values["\(name) p50"] = distribution.percentile(50)
        values["\(name) p99"] = distribution.percentile(99)
        values["\(name) max"] = distribution.max
        self.samples[name] = samples
    }
}

/// One implementation taking part in a workload.
struct Contender {
    /// `ThreadKit`, `GCD`, `OperationQueue`, `GCD asyncAfter`, `DispatchSourceTimer`, `GCD chain`,
    /// `sleep`, `GCD serial`, `GCD async+wait`, `NIO-shaped`, `default executor` or `floor`.
    let name: String
    /// Runs in the contender's process before the measured round, unrecorded: a smaller copy of
    /// the work that starts the threads and fills the caches the measured round would find warm
    /// in a long-running program. `nil` where a cold start is what is measured.
    var warmUp: (() throws -> Void)?
    /// Runs the workload once and returns what it measured.
    let run: () throws -> Measurement

    init(name: String, warmUp: (() throws -> Void)? = nil, run: @escaping () throws -> Measurement) {
        self.name = name
        self.warmUp = warmUp
        self.run = run
    }

    /// A contender that warms up on a tenth of the work, then measures all of it.
    ///
    /// - Parameter measure: Does `share` of the work (``Share/of(_:)`` of each size) and
    ///   returns what it measured.
    init(name: String, warmingUpOnATenth measure: @escaping (_ share: Share) throws -> Measurement) {
        self.init(name: name, warmUp: { _ = try measure(.tenth) }, run: { try measure(.all) })
    }
}

/// How much of a contender's work a run does: a tenth for its warm-up, all of it when measured.
enum Share {
    case tenth, all

    /// This share of `count` items, at least one.
    func of(_ count: Int) -> Int {
        self == .all ? count : max(count / 10, 1)
    }

    /// This share of `duration`.
    func of(_ duration: Duration) -> Duration {
        self == .all ? duration : duration / 10
    }
}

/// A workload: the same work done by each contender, measured the same way.
struct Workload {
    /// The id from the benchmark's specification, e.g. `pool.throughput.p1`.
    let id: String
    let metrics: [Metric]
    var contenders: [Contender]
    /// Whether a round's contenders run side by side, each in its own process, rather than one
    /// after another: only for workloads that leave the machine idle (idle CPU, a 10 ms timer), so
    /// that their ten seconds are not paid once per contender.
    var contendersRunTogether = false
    /// Releases what the workload made (pools, timers), after the contender's round.
    var finish: () -> Void = {}
}

/// Run sizes: full, or a tenth for CI.
struct Scale {
    let isQuick: Bool
    /// Measured rounds per workload: at least 15 in a full run, so that a bootstrap interval of
    /// the median of the paired ratios means something; 3 in quick mode, which only proves the
    /// benchmark works.
    let rounds: Int
    /// Whether `rounds` was asked for (`--rounds N`): then every workload runs that many.
    let roundsAreGiven: Bool

    init(isQuick: Bool, rounds: Int? = nil) {
        self.isQuick = isQuick
        self.rounds = rounds ?? (isQuick ? 3 : 15)
        roundsAreGiven = rounds != nil
    }

    /// The workloads whose verdicts 15 rounds left undecided in full runs, each a tail percentile
    /// or a spread that one unlucky round moves a lot: they run three times as many rounds in a
    /// full run, which narrows a bootstrap interval to about 1/√3 of its width for a few minutes
    /// more (their workloads are short), where changing the workloads would have changed what they
    /// measure.
    static let manyRoundWorkloads: Set<String> = [
        "pool.latency.u70.t10", "pool.latency.u70.t100", "pool.latency.u95.t10", "pool.latency.u95.t100",
        "pool.fairness", "timer.concurrent", "pool.throughput.p8",
    ]

    /// The rounds of the ``manyRoundWorkloads``: three times ``rounds`` in a full run with the
    /// default rounds, else ``rounds``.
    var manyRounds: Int { isQuick || roundsAreGiven ? rounds : 3 * rounds }

    /// The rounds `workload` runs: ``manyRounds`` for one of ``manyRoundWorkloads``, else ``rounds``.
    func rounds(for workload: String) -> Int {
        Self.manyRoundWorkloads.contains(workload) ? manyRounds : rounds
    }

    /// `full`, or a tenth of it in quick mode.
    func size(_ full: Int) -> Int { isQuick ? max(full / 10, 1) : full }

    /// `full`, or a tenth of it in quick mode.
    func duration(_ full: Duration) -> Duration { isQuick ? full / 10 : full }
}

/// Every round's measurement of one contender, rounds in order (round `i` of every contender of
/// a workload ran in the same pass, so they pair up).
struct ContenderResult {
    let name: String
    var rounds: [Measurement] = []

    /// The metric's value in each round (rounds that lack it are left out).
    func values(_ metric: String) -> [Double] {
        rounds.compactMap { $0[metric] }
    }

    /// The sample set of every round, for pooled percentiles.
    func samples(_ name: String) -> [[Double]] {
        rounds.compactMap { $0.samples[name] }
    }
}

/// A workload's results, contenders in the order they were listed.
struct WorkloadResult {
    let id: String
    let metrics: [Metric]
    var contenders: [ContenderResult]
    /// Seconds the workload took, process starts included.
    var seconds: Double = 0
}
