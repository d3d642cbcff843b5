/// How far apart two readings of the monotonic clock, one right after the other, land on this
/// machine: what a throttled start's margin is taken from (``ThrottledQueue/startMargin``).
///
/// The queue reads the clock to record a task's start, then calls the task, whose first line may
/// read it again; the distance between the two varies by about one reading's cost. That cost is a
/// few tens of nanoseconds with a fast clock source (the vDSO's TSC) and microseconds with a slow
/// one (a virtual machine's HPET or paravirtual clock), so it is measured rather than assumed.
enum ReadingFloor {
    /// The least and the most a start's margin is: 1 µs covers any fast clock with room to spare;
    /// 25 µs, the margin used before it was measured, caps a measurement that an interrupt spoiled.
    static let bounds = Duration.microseconds(1)...Duration.microseconds(25)

    /// How many gaps between readings the measurement takes: 2,000 readings cost well under a
    /// millisecond, once per process.
    static let samples = 2_000

    /// The margin for `gaps`, the distances between back-to-back readings: twice their 99th
    /// percentile (each of the two readings around a start may land anywhere within one), within
    /// ``bounds``. Pure: tests give it made-up gaps.
    static func margin(fromReadingGaps gaps: [Duration]) -> Duration {
        guard !gaps.isEmpty else { return bounds.upperBound }
        let sorted = gaps.sorted()
        let p99 = sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
        return min(max(p99 * 2, bounds.lowerBound), bounds.upperBound)
    }

    /// Reads the clock ``samples`` + 1 times back to back, and returns the margin for the gaps.
    static func measuredMargin() -> Duration {
        var gaps: [Duration] = []
        gaps.reserveCapacity(samples)
        var previous = MonotonicInstant.now()
        for _ in 0..<samples {
            let next = MonotonicInstant.now()
            gaps.append(previous.duration(to: next))
            previous = next
        }
        return margin(fromReadingGaps: gaps)
    }
}
