// The statistics every verdict rests on: percentiles, pooled percentiles over several rounds, the
// bootstrap interval of a median of paired ratios, and the verdict against a goal. Pure functions
// of their inputs (the bootstrap draws from a seeded generator), checked by `--self-test`.

import SeededRandom

/// A sorted sample, for percentiles.
struct Distribution {
    /// The values, ascending.
    let sorted: [Double]

    init(_ values: [Double]) {
        sorted = values.sorted()
    }

    init(alreadySorted: [Double]) {
        sorted = alreadySorted
    }

    var count: Int { sorted.count }

    /// The `percent`th percentile (0…100), interpolating linearly between neighbouring ranks.
    func percentile(_ percent: Double) -> Double {
        precondition(!sorted.isEmpty, "a percentile of no values")
        precondition((0...100).contains(percent), "a percentile is in 0…100, got \(percent)")
        return Stats.interpolated(rank: percent / 100 * Double(sorted.count - 1)) { sorted[$0] }
    }

    /// The quantile `q` (0…1).
    func quantile(_ q: Double) -> Double { percentile(q * 100) }

    var median: Double { percentile(50) }
    var min: Double { sorted.first! }
    var max: Double { sorted.last! }
}

/// An interval, e.g. a 95 % bootstrap confidence interval.
struct Interval: Codable, Equatable {
    let low: Double
    let high: Double

    func contains(_ value: Double) -> Bool { low <= value && value <= high }
}

/// What a goal's interval says.
enum Outcome: String, Codable {
    /// The whole interval is on the goal's side.
    case met
    /// The whole interval is on the wrong side.
    case missed
    /// The interval covers the goal: this run cannot tell.
    case inconclusive
}

/// Medians, bootstrap intervals and verdicts.
enum Stats {
    /// Bootstrap resamples behind every interval.
    static let resamples = 2_000
    /// The interval's coverage.
    static let confidence = 0.95

    /// The value at fractional `rank` (0-based) of an ascending sequence read through `at`,
    /// interpolating linearly between its two neighbours.
    static func interpolated(rank: Double, _ at: (Int) -> Double) -> Double {
        let lower = Int(rank.rounded(.down))
        let fraction = rank - Double(lower)
        let low = at(lower)
        return fraction == 0 ? low : low + (at(lower + 1) - low) * fraction
    }

    /// The median of `values` (the mean of the middle two for an even count).
    static func median(_ values: [Double]) -> Double {
        Distribution(values).median
    }

    /// The percentile bootstrap interval of the median of `values`: `resamples` resamples of the
    /// same size drawn with replacement, the median of each, and the central `confidence` of those.
    static func medianInterval(_ values: [Double], seed: UInt64 = 0x5EED) -> Interval {
        precondition(!values.isEmpty, "an interval of no values")
        var generator = SplitMix64(seed: seed)
        var medians = [Double](repeating: 0, count: resamples)
        var resample = [Double](repeating: 0, count: values.count)
        for index in 0..<resamples {
            for slot in 0..<values.count { resample[slot] = values[Int.random(in: 0..<values.count, using: &generator)] }
            medians[index] = median(resample)
        }
        return centralInterval(medians)
    }

    /// The central `confidence` of a bootstrap distribution.
    static func centralInterval(_ estimates: [Double]) -> Interval {
        let distribution = Distribution(estimates)
        let tail = (1 - confidence) / 2 * 100
        return Interval(low: distribution.percentile(tail), high: distribution.percentile(100 - tail))
    }

    /// Per-round ratios `numerator[i] / denominator[i]` of paired rounds; pairs with a zero or
    /// non-finite ratio are kept as they are (a zero numerator gives 0, a zero denominator ∞).
    static func pairedRatios(_ numerator: [Double], _ denominator: [Double]) -> [Double] {
        precondition(numerator.count == denominator.count, "paired rounds must be as many on both sides")
        return zip(numerator, denominator).map { top, bottom in
            if top == 0 && bottom == 0 { return 1 }
            return top / bottom
        }
    }

    /// The median of per-round ratios and its bootstrap interval.
    static func pairedRatio(_ numerator: [Double], _ denominator: [Double]) -> (estimate: Double, interval: Interval) {
        let ratios = pairedRatios(numerator, denominator)
        return (median(ratios), medianInterval(ratios))
    }

    /// The ratio of two pooled percentiles (every round's samples together) and its bootstrap
    /// interval, resampling whole rounds with their pairing kept: a resample draws round indices with
    /// replacement and pools those rounds of both sides.
    static func pooledPercentileRatio(
        _ numerator: PooledSamples, _ denominator: PooledSamples, percent: Double, seed: UInt64 = 0x5EED
    ) -> (estimate: Double, interval: Interval) {
        precondition(numerator.rounds == denominator.rounds, "paired rounds must be as many on both sides")
        let rounds = numerator.rounds
        let all = [Int](repeating: 1, count: rounds)
        let estimate = numerator.percentile(percent, multiplicity: all) / denominator.percentile(percent, multiplicity: all)
        var generator = SplitMix64(seed: seed)
        var ratios: [Double] = []
        ratios.reserveCapacity(resamples / 2)
        var multiplicity = [Int](repeating: 0, count: rounds)
        for _ in 0..<(resamples / 2) {
            for slot in 0..<rounds { multiplicity[slot] = 0 }
            for _ in 0..<rounds { multiplicity[Int.random(in: 0..<rounds, using: &generator)] += 1 }
            ratios.append(numerator.percentile(percent, multiplicity: multiplicity)
                / denominator.percentile(percent, multiplicity: multiplicity))
        }
        return (estimate, centralInterval(ratios))
    }

    /// Judges an interval of "ThreadKit / peer" (or of ThreadKit's value) against "at most `limit`".
    static func judge(_ interval: Interval, atMost limit: Double) -> Outcome {
        if interval.high <= limit { return .met }
        if interval.low > limit { return .missed }
        return .inconclusive
    }
}

/// The latency samples of several rounds, each round sorted, for percentiles of any multiset of
/// rounds without copying: the k-th smallest of the union is found by bisection over all values.
struct PooledSamples {
    /// Each round's samples, ascending.
    let perRound: [[Double]]
    /// Every sample of every round, ascending: the candidates for any order statistic.
    private let merged: [Double]

    init(_ rounds: [[Double]]) {
        perRound = rounds.map { $0.sorted() }
        merged = rounds.flatMap { $0 }.sorted()
    }

    var rounds: Int { perRound.count }

    /// All rounds pooled.
    var pooled: Distribution { Distribution(alreadySorted: merged) }

    /// The percentile of the pool in which round `i` appears `multiplicity[i]` times, interpolated
    /// between ranks as ``Distribution/percentile(_:)`` does.
    func percentile(_ percent: Double, multiplicity: [Int]) -> Double {
        let total = zip(perRound, multiplicity).reduce(0) { $0 + $1.0.count * $1.1 }
        precondition(total > 0, "a percentile of no samples")
        let rank = percent / 100 * Double(total - 1)
        return Stats.interpolated(rank: rank) { orderStatistic($0, multiplicity: multiplicity) }
    }

    /// The `k`th smallest (0-based) of the pool: the first merged value with more than `k` pooled
    /// samples at or below it.
    func orderStatistic(_ k: Int, multiplicity: [Int]) -> Double {
        var low = 0, high = merged.count - 1
        while low < high {
            let middle = (low + high) / 2
            if countAtOrBelow(merged[middle], multiplicity: multiplicity) > k { high = middle } else { low = middle + 1 }
        }
        return merged[low]
    }

    private func countAtOrBelow(_ value: Double, multiplicity: [Int]) -> Int {
        var count = 0
        for (round, times) in zip(perRound, multiplicity) where times > 0 {
            var low = 0, high = round.count
            while low < high {
                let middle = (low + high) / 2
                if round[middle] <= value { low = middle + 1 } else { high = middle }
            }
            count += low * times
        }
        return count
    }
}

