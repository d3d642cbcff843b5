// ThreadKit's goals from the benchmark's specification, and how a result is judged against them.

/// A target for one ThreadKit metric.
struct Goal {
    enum Kind {
        /// ThreadKit's median at most `factor` × the peer's median in the same run.
        case ratio(peer: String, factor: Double)
        /// ThreadKit's median at most `limit` (in `unit`).
        case atMost(Double, unit: String)
        /// Zero in every repetition (the maximum over repetitions is 0).
        case zero
    }

    let workload: String
    let metric: String
    let kind: Kind

    /// The goal as the table shows it, e.g. "≤ 0.35× GCD".
    var text: String {
        switch kind {
        case .ratio(let peer, let factor): "≤ \(Format.factor(factor))× \(peer)"
        case .atMost(let limit, let unit): "≤ \(Format.plain(limit)) \(unit)"
        case .zero: "= 0"
        }
    }

    static let all: [Goal] = [
        Goal(workload: "pool.throughput.p1", metric: "wall per item", kind: .ratio(peer: "GCD", factor: 0.35)),
        Goal(workload: "pool.throughput.p1", metric: "CPU per item", kind: .ratio(peer: "GCD", factor: 0.5)),
        Goal(workload: "pool.throughput.p2", metric: "wall per item", kind: .ratio(peer: "GCD", factor: 0.5)),
        Goal(workload: "pool.schedule.p1", metric: "wall per item", kind: .ratio(peer: "GCD", factor: 0.6)),
        Goal(workload: "pool.wake", metric: "start latency p50", kind: .ratio(peer: "GCD", factor: 1.0)),
        Goal(workload: "pool.wake", metric: "start latency p99", kind: .ratio(peer: "GCD", factor: 1.0)),
        Goal(workload: "timer.fire", metric: "lateness p50", kind: .ratio(peer: "GCD asyncAfter", factor: 0.5)),
        Goal(workload: "timer.fire", metric: "lateness p99", kind: .ratio(peer: "GCD asyncAfter", factor: 1.0)),
        Goal(workload: "timer.fire", metric: "process CPU", kind: .ratio(peer: "GCD asyncAfter", factor: 0.5)),
        Goal(workload: "timer.fire", metric: "early calls", kind: .zero),
        Goal(workload: "timer.pending", metric: "insert per call", kind: .ratio(peer: "GCD asyncAfter", factor: 0.3)),
        Goal(workload: "timer.pending", metric: "resident per call", kind: .ratio(peer: "GCD asyncAfter", factor: 0.25)),
        Goal(workload: "timer.pending", metric: "cancel per call", kind: .ratio(peer: "GCD asyncAfter", factor: 0.5)),
        Goal(workload: "throttle.precision", metric: "error p50", kind: .ratio(peer: "GCD chain", factor: 0.6)),
        Goal(workload: "throttle.precision", metric: "error p99", kind: .ratio(peer: "GCD chain", factor: 1.0)),
        Goal(workload: "throttle.precision", metric: "early starts", kind: .zero),
        Goal(workload: "log.disabled", metric: "per call", kind: .atMost(2, unit: "ns")),
        Goal(workload: "dedicated.throughput", metric: "wall per item", kind: .ratio(peer: "GCD serial", factor: 0.5)),
        Goal(workload: "dedicated.sync", metric: "per call", kind: .ratio(peer: "GCD serial", factor: 1.0)),
        Goal(workload: "dispatch.sync.held", metric: "per call", kind: .ratio(peer: "GCD serial", factor: 1.5)),
    ]

    static func forRow(workload: String, metric: String) -> Goal? {
        all.first { $0.workload == workload && $0.metric == metric }
    }
}

/// How ThreadKit's row fared against its goal.
struct Verdict {
    let goal: Goal
    /// ThreadKit's median over the peer's, for ratio goals.
    let ratio: Double?
    let isMet: Bool

    /// Judges ThreadKit's `row` against its goal, with `rows` holding the peers of the same run.
    init?(for row: Row, among rows: [Row]) {
        guard row.implementation == "ThreadKit",
              let goal = Goal.forRow(workload: row.workload, metric: row.metric) else { return nil }
        self.goal = goal
        switch goal.kind {
        case .ratio(let peer, let factor):
            guard let peerRow = rows.first(where: {
                $0.workload == row.workload && $0.metric == row.metric && $0.implementation == peer
            }) else { return nil }
            let ratio = row.summary.median / peerRow.summary.median
            self.ratio = ratio
            isMet = ratio.isFinite ? ratio <= factor : row.summary.median <= 0
        case .atMost(let limit, _):
            ratio = nil
            isMet = row.summary.median <= limit
        case .zero:
            ratio = nil
            isMet = row.summary.max == 0
        }
    }
}
