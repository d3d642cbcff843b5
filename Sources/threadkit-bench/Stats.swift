// Percentiles of a sample and the median / min / max summary of repetitions.

/// A sorted sample, for percentiles.
struct Distribution {
    /// The values, ascending.
    let sorted: [Double]

    init(_ values: [Double]) {
        sorted = values.sorted()
    }

    var count: Int { sorted.count }

    /// The `percent`th percentile (0…100), interpolating linearly between neighbouring ranks.
    func percentile(_ percent: Double) -> Double {
        precondition(!sorted.isEmpty, "a percentile of no values")
        precondition((0...100).contains(percent), "a percentile is in 0…100, got \(percent)")
        let rank = percent / 100 * Double(sorted.count - 1)
        let lower = Int(rank.rounded(.down))
        let upper = Swift.min(lower + 1, sorted.count - 1)
        let fraction = rank - Double(lower)
        return sorted[lower] + (sorted[upper] - sorted[lower]) * fraction
    }

    /// The quantile `q` (0…1).
    func quantile(_ q: Double) -> Double { percentile(q * 100) }

    var median: Double { percentile(50) }
    var min: Double { sorted.first! }
    var max: Double { sorted.last! }
}

/// How one metric varied over the measured repetitions.
struct Summary: Codable {
    let median: Double
    let min: Double
    let max: Double

    init(_ repetitions: [Double]) {
        let distribution = Distribution(repetitions)
        median = distribution.median
        min = distribution.min
        max = distribution.max
    }
}
