/// How late a queue's thread woke from its recent timed waits toward a start: how long it watches
/// the clock before the next start instead of sleeping (``finalApproach``). A pure value, part of
/// the ``ThrottleSchedule``: tests give it made-up latenesses.
///
/// A kernel wakes a thread from a timed wait some time after the deadline: tens of microseconds on
/// a quiet machine, more on a virtual machine, and more the longer the sleep (a 10 ms wait woke
/// 104 µs late at the median, 117 µs at the 90th percentile, on the 2-core virtual machine of
/// `Docs/benchmarks.md`). A watch shorter than that wakes the thread after the start it waited for,
/// which then starts late by the difference. So the watch is learned from the thread's own wakes,
/// as they are on this machine now, within ``ThrottledQueue/finalApproach``.
struct WakeLateness: Equatable, Sendable {
    /// How many recent wakes it remembers.
    static let kept = 16

    /// The latest wakes' lateness, as a ring of up to ``kept``.
    private var recent: [Duration] = []
    private var oldest = 0
    /// How long to watch the clock before a start: a quarter more than the second-latest of the
    /// remembered wakes (about their 90th percentile, so that one stray wake does not lengthen
    /// every watch), within ``ThrottledQueue/finalApproach``; its lower bound before two wakes.
    /// Worked out as each wake is recorded: a queue at a short interval asks for it several times
    /// per start.
    private(set) var finalApproach = ThrottledQueue.finalApproach.lowerBound

    /// Remembers how late a timed wait woke (after its deadline), forgetting the oldest beyond ``kept``.
    mutating func record(_ lateness: Duration) {
        let lateness = max(lateness, .zero)
        if recent.count < Self.kept {
            recent.append(lateness)
        } else {
            recent[oldest] = lateness
            oldest = (oldest + 1) % Self.kept
        }
        guard recent.count >= 2 else { return }
        var (latest, secondLatest) = (Duration.zero, Duration.zero)
        for wake in recent where wake > secondLatest {
            (latest, secondLatest) = wake > latest ? (wake, latest) : (latest, wake)
        }
        let bounds = ThrottledQueue.finalApproach
        finalApproach = min(max(secondLatest + secondLatest / 4, bounds.lowerBound), bounds.upperBound)
    }
}
