/// Where one call of a ``TimerThread`` stands, in one byte that its ``TimerHandle`` keeps atomically.
///
/// A pure value: each transition is a function from a state to the next, or `nil` where it does
/// not apply. The handle applies them with a compare-and-exchange, so of two threads that race from
/// one state (a cancel and the timer thread taking the call to run) exactly one moves it on; the
/// winner owns the call's closure from then on.
///
/// ```
///            started            finished (one-shot)
/// scheduled ────────> running ─────────────────────> fired
///     │  ^               │  │
///     │  └───────────────┘  │ cancelled (repeating: stops the runs after this one)
///     │ finished (repeating)│
///     │ cancelled           v
///     └───────────────> cancelled
/// ```
struct TimerCallState: Equatable, CustomStringConvertible {
    enum Phase: UInt8 {
        /// Waiting in the timer's heap.
        case scheduled
        /// Running on the timer thread now.
        case running
        /// A one-shot call that has run.
        case fired
        /// Cancelled, or dropped by `dispose()` or by the release of its timer: it will not run (again).
        case cancelled
    }

    /// The phase in the low two bits, ``hasRunBit`` above them.
    let rawValue: UInt8

    private static let hasRunBit: UInt8 = 0b100

    init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    init(_ phase: Phase, hasRun: Bool) {
        rawValue = phase.rawValue | (hasRun ? Self.hasRunBit : 0)
    }

    /// A call just scheduled.
    static let scheduled = TimerCallState(.scheduled, hasRun: false)

    var phase: Phase { Phase(rawValue: rawValue & 0b11)! }

    /// Whether a run of the call has begun, ever.
    var hasRun: Bool { rawValue & Self.hasRunBit != 0 }

    /// The timer thread takes the call to run: only a scheduled call.
    func started() -> TimerCallState? {
        phase == .scheduled ? TimerCallState(.running, hasRun: true) : nil
    }

    /// A run ended: a one-shot call has fired, a repeating one waits for its next run. `nil` if the
    /// call is not running (a repeating call cancelled during the run).
    func finished(repeating: Bool) -> TimerCallState? {
        guard phase == .running else { return nil }
        return TimerCallState(repeating ? .scheduled : .fired, hasRun: true)
    }

    /// A cancel stops the call: a scheduled call, or a repeating call during a run (its later runs).
    /// `nil` if there is nothing left to stop: a one-shot call running or run, a cancelled call.
    func cancelled(repeating: Bool) -> TimerCallState? {
        switch phase {
        case .scheduled: TimerCallState(.cancelled, hasRun: hasRun)
        case .running where repeating: TimerCallState(.cancelled, hasRun: true)
        case .running, .fired, .cancelled: nil
        }
    }

    /// "scheduled", "running", "fired" or "cancelled", with "(has run)" once a run has begun.
    var description: String {
        "\(phase)\(hasRun ? " (has run)" : "")"
    }
}
