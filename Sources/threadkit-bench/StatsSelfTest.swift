// `threadkit-bench --self-test`: checks the pure statistics (percentiles, pooled percentiles,
// bootstrap intervals, verdicts) against hand-worked values and brute force. CI runs it with the
// quick benchmark; the benchmark is an executable, so this is its unit test.

import SeededRandom

/// The checks behind `--self-test`.
enum StatsSelfTest {
    /// Runs every check; returns the failures (empty when all hold).
    static func run() -> [String] {
        var failures: [String] = []
        func check(_ condition: Bool, _ what: String) {
            if !condition { failures.append(what) }
        }
        func close(_ a: Double, _ b: Double, _ tolerance: Double = 1e-9) -> Bool { abs(a - b) <= tolerance * max(1, abs(b)) }

        // Percentiles interpolate between ranks.
        let small = Distribution([4, 1, 3, 2])
        check(close(small.median, 2.5), "median of 1…4 is 2.5, got \(small.median)")
        check(close(small.percentile(0), 1) && close(small.percentile(100), 4), "p0 and p100 are min and max")
        check(close(small.percentile(25), 1.75), "p25 of 1…4 is 1.75, got \(small.percentile(25))")
        check(close(Distribution([7]).percentile(99), 7), "any percentile of one value is that value")
        let hundred = Distribution((1...101).map(Double.init))
        check(close(hundred.percentile(99), 100), "p99 of 1…101 is 100, got \(hundred.percentile(99))")

        // Paired ratios: 0/0 counts as 1 (both zero: equal), x/0 as infinite.
        check(Stats.pairedRatios([2, 0, 1], [4, 0, 0]) == [0.5, 1, .infinity], "paired ratios with zeros")

        // The bootstrap interval of a constant is that constant; it holds the median; it is seeded.
        let constant = Stats.medianInterval([3, 3, 3, 3, 3])
        check(constant == Interval(low: 3, high: 3), "interval of a constant, got \(constant)")
        var generator = SplitMix64(seed: 42)
        let noisy = (0..<15).map { _ in Double.random(in: 0.5...1.5, using: &generator) }
        let interval = Stats.medianInterval(noisy)
        check(interval.contains(Stats.median(noisy)), "the interval holds the median")
        check(interval.low >= noisy.min()! && interval.high <= noisy.max()!, "the interval lies within the data")
        check(interval.high - interval.low < 0.8, "15 values in 0.5…1.5 give an interval narrower than 0.8, got \(interval)")
        check(interval == Stats.medianInterval(noisy), "the same data give the same interval")
        // Coverage: over many samples of 15 from a known distribution, the 95 % interval holds the
        // true median (1.0) most of the time (a percentile bootstrap of a median of 15 is a little
        // conservative or liberal; 85 % is a loose lower bound that a broken interval fails).
        var covered = 0
        for trial in 0..<200 {
            var draws = SplitMix64(seed: UInt64(trial) + 1_000)
            let sample = (0..<15).map { _ in Double.random(in: 0...2, using: &draws) }
            if Stats.medianInterval(sample, seed: UInt64(trial)).contains(1.0) { covered += 1 }
        }
        check(covered >= 170, "coverage of the 95 % interval over 200 trials: \(covered)")

        // Verdicts: met when the interval is under the goal, missed when over, else inconclusive.
        check(Stats.judge(Interval(low: 0.2, high: 0.4), atMost: 0.5) == .met, "under the goal is met")
        check(Stats.judge(Interval(low: 0.6, high: 0.9), atMost: 0.5) == .missed, "over the goal is missed")
        check(Stats.judge(Interval(low: 0.4, high: 0.6), atMost: 0.5) == .inconclusive, "covering the goal is inconclusive")
        check(Stats.judge(Interval(low: 0.5, high: 0.5), atMost: 0.5) == .met, "on the goal is met")

        // Pooled percentiles of any multiset of rounds equal brute force over the concatenation.
        var draws = SplitMix64(seed: 7)
        let rounds = (0..<5).map { round in
            (0..<(20 + round * 7)).map { _ in Double(Int.random(in: 0...40, using: &draws)) }
        }
        let pooled = PooledSamples(rounds)
        for trial in 0..<50 {
            let multiplicity = (0..<rounds.count).map { _ in Int.random(in: 0...3, using: &draws) }
            guard multiplicity.contains(where: { $0 > 0 }) else { continue }
            var concatenated: [Double] = []
            for (round, times) in zip(rounds, multiplicity) {
                for _ in 0..<times { concatenated += round }
            }
            let brute = Distribution(concatenated)
            for percent in [0.0, 10, 50, 90, 99, 100] {
                let fast = pooled.percentile(percent, multiplicity: multiplicity)
                check(close(fast, brute.percentile(percent)),
                      "pooled p\(percent) of trial \(trial): \(fast), brute force \(brute.percentile(percent))")
            }
        }
        check(close(pooled.pooled.percentile(99), Distribution(rounds.flatMap { $0 }).percentile(99)), "pooled p99")

        // A pooled ratio of a side with itself is exactly 1, with the interval [1, 1].
        let same = Stats.pooledPercentileRatio(pooled, pooled, percent: 99)
        check(same.estimate == 1 && same.interval == Interval(low: 1, high: 1), "pooled ratio of a side with itself")
        // Doubling every sample doubles the ratio.
        let doubled = PooledSamples(rounds.map { $0.map { $0 * 2 } })
        let twice = Stats.pooledPercentileRatio(doubled, pooled, percent: 50)
        check(close(twice.estimate, 2) && close(twice.interval.low, 2) && close(twice.interval.high, 2), "doubled samples give 2")
        // Verdicts on a made-up workload: ThreadKit at half GCD's cost in every round meets "≤ 0.6×",
        // misses "≤ 0.4×", and a pooled percentile is judged on the pooled samples.
        func measuredRounds(_ values: [Double], samples: (Int) -> [Double]) -> [Measurement] {
            values.enumerated().map { index, value in
                var measurement = Measurement(values: ["wall per item": value])
                measurement.addLatencyPercentiles("lateness", samples: samples(index))
                return measurement
            }
        }
        let peerValues = (0..<15).map { 100 + Double($0 % 5) * 10 }
        let result = WorkloadResult(
            id: "self.test", metrics: [Metric(name: "wall per item", unit: "ns")] + Metric.percentiles("lateness"),
            contenders: [
                ContenderResult(name: "ThreadKit", rounds: measuredRounds(peerValues.map { $0 / 2 }) { round in (1...100).map { Double($0 + round) } }),
                ContenderResult(name: "GCD", rounds: measuredRounds(peerValues) { round in (1...100).map { Double(($0 + round) * 4) } }),
            ])
        func verdict(_ metric: String, _ factor: Double) -> Verdict? {
            Verdict(Goal(workload: "self.test", metric: metric, kind: .ratio(peer: "GCD", factor: factor)), in: result)
        }
        check(verdict("wall per item", 0.6)?.outcome == .met, "half the cost meets ≤ 0.6×")
        check(verdict("wall per item", 0.4)?.outcome == .missed, "half the cost misses ≤ 0.4×")
        check(verdict("wall per item", 0.5)?.outcome == .met, "exactly half meets ≤ 0.5× (the interval is [0.5, 0.5])")
        check(close(verdict("lateness p99", 0.3)?.estimate ?? 0, 0.25), "a quarter of the pooled p99: 0.25×")
        check(verdict("lateness p99", 0.3)?.outcome == .met && verdict("lateness p99", 0.2)?.outcome == .missed,
              "a pooled p99 of a quarter meets ≤ 0.3× and misses ≤ 0.2×")
        check(Verdict(Goal(workload: "self.test", metric: "wall per item", kind: .ratio(peer: "nobody", factor: 1)), in: result) == nil,
              "no verdict without the peer")
        return failures
    }
}
