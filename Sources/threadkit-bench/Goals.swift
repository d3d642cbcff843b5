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

    private static func ratio(_ workload: String, _ metric: String, _ peer: String, _ factor: Double) -> Goal {
        Goal(workload: workload, metric: metric, kind: .ratio(peer: peer, factor: factor))
    }

    static let all: [Goal] = [
        // Issue 10's goals, on today's shared-capture items.
        ratio("pool.throughput.p1", "wall per item", "GCD", 0.35),
        ratio("pool.throughput.p1", "CPU per item", "GCD", 0.5),
        ratio("pool.throughput.p2", "wall per item", "GCD", 0.5),
        ratio("pool.throughput.p8", "wall per item", "GCD", 0.5),
        ratio("pool.schedule.p1", "wall per item", "GCD", 0.4),
        ratio("pool.wake", "start latency p50", "GCD", 1.0),
        ratio("pool.wake", "start latency p99", "GCD", 1.0),
        ratio("pool.wake", "CPU per wake", "GCD", 1.0),
        ratio("timer.fire", "lateness p50", "GCD asyncAfter", 0.5),
        ratio("timer.fire", "lateness p99", "GCD asyncAfter", 0.5),
        ratio("timer.fire", "process CPU", "GCD asyncAfter", 0.5),
        Goal(workload: "timer.fire", metric: "early calls", kind: .zero),
        ratio("timer.fire.work", "lateness p99", "GCD asyncAfter", 1.0),
        Goal(workload: "timer.fire.work", metric: "early calls", kind: .zero),
        ratio("timer.fire.burst", "lateness p99", "GCD asyncAfter", 1.0),
        Goal(workload: "timer.fire.burst", metric: "early calls", kind: .zero),
        // Against the peer whose cancel really removes the call.
        ratio("timer.pending", "insert per call", "DispatchSourceTimer", 0.3),
        ratio("timer.pending", "heap per call", "DispatchSourceTimer", 0.25),
        ratio("timer.pending", "cancel per call", "DispatchSourceTimer", 0.5),
        ratio("timer.concurrent", "schedule per call", "GCD asyncAfter", 1.0),
        ratio("timer.concurrent", "lateness p99", "GCD asyncAfter", 1.0),
        ratio("timer.repeat", "drift at end", "DispatchSourceTimer", 1.0),
        ratio("throttle.precision", "error p50", "GCD chain", 0.2),
        ratio("throttle.precision", "error p99", "GCD chain", 1.0),
        Goal(workload: "throttle.precision", metric: "early starts", kind: .zero),
        Goal(workload: "log.disabled", metric: "per call", kind: .atMost(2, unit: "ns")),
        ratio("dedicated.throughput", "wall per item", "GCD serial", 0.5),
        ratio("dedicated.sync", "per call", "GCD serial", 1.0),
        ratio("dispatch.sync.held", "per call", "GCD serial", 1.5),
        // Issue 9: URLDispatcher against URLSession with the same configuration.
        ratio("url.loopback", "wall", "URLSession", 1.1),
        Goal(workload: "url.loopback", metric: "endpoints off the limit", kind: .zero),
        Goal(workload: "url.timeout", metric: "lateness p99", kind: .atMost(10, unit: "ms")),
        // Issue 19, item 4: the cost per request stays flat over the history.
        Goal(workload: "url.history", metric: "last / first CPU", kind: .atMost(1.25, unit: "×")),
        // Issue 13, item 3: what users choose a pool by.
        ratio("pool.latency.u70.t10", "start latency p99", "GCD", 1.0),
        ratio("pool.latency.u70.t100", "start latency p99", "GCD", 1.0),
        ratio("pool.latency.u95.t10", "start latency p99", "GCD", 1.0),
        ratio("pool.latency.u95.t100", "start latency p99", "GCD", 1.0),
        ratio("pool.memory", "heap after drain", "GCD", 1.1),
        ratio("pool.fairness", "share spread", "GCD", 1.0),
        Goal(workload: "pool.idle", metric: "idle CPU", kind: .atMost(0, unit: "ms")),
        ratio("pool.cold", "first task latency", "GCD", 1.0),
        ratio("pool.executor", "wall per task", "default executor", 1.0),
    ]

    static func forRow(workload: String, metric: String) -> Goal? {
        all.first { $0.workload == workload && $0.metric == metric }
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
