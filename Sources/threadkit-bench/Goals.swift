// ThreadKit's goals, and how a run's rounds are judged against them.

/// A target for one ThreadKit metric.
struct Goal {
    /// What the goal compares.
    enum Kind {
        /// ThreadKit at most `factor` × the peer, judged on paired rounds: the median of the
        /// per-round ratios (for a percentile: the ratio of the pooled percentiles), with its
        /// bootstrap interval.
        case ratio(peer: String, factor: Double)
        /// ThreadKit's median at most `limit` (in `unit`), with the median's bootstrap interval.
        case atMost(Double, unit: String)
        /// Zero in every round.
        case zero
    }

    let workload: String
    let metric: String
    let kind: Kind

    /// The peer of a ratio goal.
    var peer: String? {
        if case .ratio(let peer, _) = kind { return peer }
        return nil
    }

    /// The goal as the table shows it, e.g. "≤ 0.35× GCD".
    var text: String {
        switch kind {
        case .ratio(let peer, let factor): "≤ \(Format.factor(factor))× \(peer)"
        case .atMost(let limit, let unit): "≤ \(Format.plain(limit)) \(unit)"
        case .zero: "= 0"
        }
    }

    /// The goals of one workload: ThreadKit at most the factor beside each metric × `peer`, and
    /// the metrics that must be zero in every round.
    private static func workload(
        _ workload: String, against peer: String, _ factors: KeyValuePairs<String, Double>, zero: [String] = []
    ) -> [Goal] {
        factors.map { Goal(workload: workload, metric: $0.key, kind: .ratio(peer: peer, factor: $0.value)) }
            + zero.map { Goal(workload: workload, metric: $0, kind: .zero) }
    }

    /// The goals of one workload that has no peer: ThreadKit's median at most a limit, or zero.
    private static func workload(_ workload: String, _ kinds: KeyValuePairs<String, Kind>) -> [Goal] {
        kinds.map { Goal(workload: workload, metric: $0.key, kind: $0.value) }
    }

    /// Every goal, one workload a line.
    static let all: [Goal] = [
        // Issue 10's goals, on today's shared-capture items.
        workload("pool.throughput.p1", against: "GCD", ["wall per item": 0.35, "CPU per item": 0.5]),
        workload("pool.throughput.p2", against: "GCD", ["wall per item": 0.5]),
        workload("pool.throughput.p8", against: "GCD", ["wall per item": 0.5]),
        workload("pool.schedule.p1", against: "GCD", ["wall per item": 0.4]),
        // Issue 23, item 2: a wake-up cheaper than GCD's at both percentiles, for no more CPU.
        workload("pool.wake", against: "GCD", ["start latency p50": 0.8, "start latency p99": 0.8, "CPU per wake": 1.0]),
        workload("timer.fire", against: "GCD asyncAfter", ["lateness p50": 0.5, "lateness p99": 0.5, "process CPU": 0.5], zero: ["early calls"]),
        // Issue 23, item 3: the median within 1.1× how late the kernel wakes a bare timed wait.
        workload("timer.fire", against: "floor", ["lateness p50": 1.1]),
        workload("timer.fire.work", against: "GCD asyncAfter", ["lateness p99": 1.0], zero: ["early calls"]),
        workload("timer.fire.burst", against: "GCD asyncAfter", ["lateness p99": 1.0], zero: ["early calls"]),
        // Against the peer whose cancel really removes the call.
        workload("timer.pending", against: "DispatchSourceTimer", ["insert per call": 0.3, "heap per call": 0.25, "cancel per call": 0.5]),
        workload("timer.concurrent", against: "GCD asyncAfter", ["schedule per call": 1.0, "lateness p99": 1.0]),
        workload("timer.repeat", against: "DispatchSourceTimer", ["drift at end": 1.0]),
        workload("throttle.precision", against: "GCD chain", ["error p50": 0.2, "error p99": 1.0], zero: ["early starts"]),
        workload("log.disabled", ["per call": .atMost(2, unit: "ns")]),
        workload("diagnostics.dump", ["dump max": .atMost(50, unit: "ms")]),
        workload("dedicated.throughput", against: "GCD serial", ["wall per item": 0.5]),
        // Issue 23, item 1: a sync onto a dedicated thread against what does the same job, a round
        // trip to another thread (GCD's serial `sync` runs on the caller's thread: information only).
        workload("dedicated.sync", against: "floor", ["per call": 1.3]),
        workload("dedicated.sync", against: "GCD async+wait", ["per call": 0.2]),
        workload("dedicated.sync", against: "NIO-shaped", ["per call": 0.2]),
        workload("dispatch.sync.held", against: "floor", ["per call": 1.5]),
        // Issue 9: URLDispatcher against URLSession with the same configuration.
        workload("url.loopback", against: "URLSession", ["wall": 1.1], zero: ["endpoints off the limit"]),
        workload("url.timeout", ["lateness p99": .atMost(10, unit: "ms")]),
        // Issue 19, item 4: the cost per request stays flat over the history.
        workload("url.history", ["last / first CPU": .atMost(1.25, unit: "×")]),
        // Issue 13, item 3: what users choose a pool by.
        workload("pool.latency.u70.t10", against: "GCD", ["start latency p99": 1.0]),
        workload("pool.latency.u70.t100", against: "GCD", ["start latency p99": 1.0]),
        workload("pool.latency.u95.t10", against: "GCD", ["start latency p99": 1.0]),
        workload("pool.latency.u95.t100", against: "GCD", ["start latency p99": 1.0]),
        workload("pool.memory", against: "GCD", ["heap after drain": 1.1]),
        workload("pool.fairness", against: "GCD", ["share spread": 1.0]),
        workload("pool.idle", ["idle CPU": .atMost(0, unit: "ms")]),
        // Issue 23, item 4: GCD's threads exist already, a cold pool starts its first.
        workload("pool.cold", against: "GCD", ["first task latency": 1.2]),
        workload("pool.executor", against: "default executor", ["wall per task": 0.8]),
        // Issue 24, item 6: a shared start decision costs little more than the round trip it needs,
        // and 8 processes sharing one limit keep it on Redis's clock.
        workload("redis.decision", against: "PING", ["round trip p50": 1.5]),
        workload("redis.fleet", ["max per window / N": .atMost(1, unit: "×"), "close pairs": .zero, "starts before reservation": .zero]),
    ].flatMap { $0 }

    /// The goals of one metric of a workload: one per peer it is judged against.
    static func forRow(workload: String, metric: String) -> [Goal] {
        all.filter { $0.workload == workload && $0.metric == metric }
    }
}

/// How ThreadKit fared against one goal in one run.
struct Verdict {
    /// ThreadKit / `peer` on paired rounds: the median of the per-round ratios, or for a percentile
    /// the ratio of the pooled percentiles, with the 95 % bootstrap interval; `nil` when the two did
    /// not run the same rounds.
    static func ratio(_ metric: Metric, _ threadKit: ContenderResult, to peer: ContenderResult) -> (estimate: Double, interval: Interval)? {
        if let percentile = metric.percentileOf {
            let mine = threadKit.samples(percentile.samples), theirs = peer.samples(percentile.samples)
            guard !mine.isEmpty, mine.count == theirs.count else { return nil }
            return Stats.pooledPercentileRatio(PooledSamples(mine), PooledSamples(theirs), percent: percentile.percent)
        }
        let mine = threadKit.values(metric.name), theirs = peer.values(metric.name)
        guard !mine.isEmpty, mine.count == theirs.count else { return nil }
        return Stats.pairedRatio(mine, theirs)
    }

    let goal: Goal
    /// For ratio goals: ThreadKit / peer (median of paired per-round ratios, or the ratio of pooled
    /// percentiles); for `atMost`: ThreadKit's median; for `zero`: the sum over rounds.
    let estimate: Double
    /// The 95 % bootstrap interval of `estimate` (`nil` for `zero` goals).
    let interval: Interval?
    let outcome: Outcome

    /// Judges ThreadKit's rounds in `result` against `goal`; `nil` when a side did not run.
    init?(_ goal: Goal, in result: WorkloadResult) {
        guard let metric = result.metrics.first(where: { $0.name == goal.metric }),
              let threadKit = result.contenders.first(where: { $0.name == "ThreadKit" }) else { return nil }
        self.goal = goal
        switch goal.kind {
        case .ratio(let peerName, let factor):
            guard let peer = result.contenders.first(where: { $0.name == peerName }),
                  let judged = Self.ratio(metric, threadKit, to: peer) else { return nil }
            estimate = judged.estimate
            interval = judged.interval
            outcome = Stats.judge(judged.interval, atMost: factor)
        case .atMost(let limit, _):
            let values = threadKit.values(goal.metric)
            guard !values.isEmpty else { return nil }
            estimate = Stats.median(values)
            let interval = Stats.medianInterval(values)
            self.interval = interval
            outcome = Stats.judge(interval, atMost: limit)
        case .zero:
            let values = threadKit.values(goal.metric)
            guard !values.isEmpty else { return nil }
            estimate = values.reduce(0, +)
            interval = nil
            outcome = estimate == 0 ? .met : .missed
        }
    }
}
