/// What a timer counts for ``Diagnostics``: its calls scheduled, run and cancelled, and how late
/// each run started, in the buckets of a Prometheus histogram.
///
/// A pure value, changed under the timer's mutex where it is held anyway (a call added, a run
/// finished, a call stopped): the timer's paths take no lock or clock reading for it.
struct TimerMetrics: Equatable {
    /// The upper bounds of the lateness buckets, in nanoseconds: 50 µs to 100 ms; `+Inf` follows.
    static let latenessBounds: [Int64] = [
        50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000,
        50_000_000, 100_000_000,
    ]

    /// Calls scheduled (a repeating call once).
    private(set) var scheduled: UInt64 = 0
    /// Runs started (each run of a repeating call).
    private(set) var fired: UInt64 = 0
    /// Calls stopped before they ran (again): cancelled, or dropped by dispose or release.
    private(set) var cancelled: UInt64 = 0
    /// Runs per lateness bucket, not cumulative; the last is the `+Inf` bucket's own.
    private(set) var latenessCounts = [UInt64](repeating: 0, count: latenessBounds.count + 1)
    /// The sum of every run's lateness, in seconds.
    private(set) var latenessSum = 0.0

    /// A call was scheduled.
    mutating func recordScheduled() {
        scheduled &+= 1
    }

    /// A run started `lateness` nanoseconds after its deadline.
    mutating func recordFired(lateness: Int64) {
        fired &+= 1
        let bucket = Self.latenessBounds.firstIndex { lateness <= $0 } ?? Self.latenessBounds.count
        latenessCounts[bucket] &+= 1
        latenessSum += Double(max(0, lateness)) / 1e9
    }

    /// `count` calls were stopped before they ran (again).
    mutating func recordCancelled(_ count: Int) {
        cancelled &+= UInt64(count)
    }

    /// The lateness buckets as Prometheus has them: cumulative, bounds in seconds, `+Inf` last.
    var latenessBuckets: [Snapshot.Bucket] {
        var total: UInt64 = 0
        return latenessCounts.enumerated().map { index, count in
            total += count
            let bound = index < Self.latenessBounds.count ? Double(Self.latenessBounds[index]) / 1e9 : .infinity
            return Snapshot.Bucket(upperBound: bound, count: total)
        }
    }
}
