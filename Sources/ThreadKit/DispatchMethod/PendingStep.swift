#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A step handed to its target and not yet started: whoever claims it first runs it, the target,
/// or a waiter that holds the target's context and so must run it inline.
@usableFromInline
final class PendingStep: Sendable {
    /// The serial context the step was queued on, if any.
    let context: SerialContext?
    /// For a delayed step: not before this.
    let due: MonotonicInstant?
    private let work: Locked<(@Sendable () -> Void)?>

    init(context: SerialContext?, due: MonotonicInstant?, work: @escaping @Sendable () -> Void) {
        self.context = context
        self.due = due
        self.work = Locked(work)
    }

    /// The step's work, for the one caller that claims it first.
    func claim() -> (@Sendable () -> Void)? {
        work.withLock { $0.take() }
    }

    /// Sleeps until the step is due (never for a step without a delay).
    func _blockingSleepUntilDue() {
        guard let due else { return }
        var deadline = due.timespecValue
        while MonotonicInstant.now() < due {
            _ = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil)
        }
    }
}

/// Runs a step when its target does, or fails it when its target drops it unrun
/// (``ThreadPool/disposeNow()``, ``DedicatedThread/disposeNow()``, ``ThrottledQueue/cancelAll()``),
/// so that nobody waits for it forever. The closure given to the target is its only other holder.
final class DropWatch: Sendable {
    private let step: PendingStep
    private let onDrop: @Sendable () -> Void

    init(_ step: PendingStep, onDrop: @escaping @Sendable () -> Void) {
        self.step = step
        self.onDrop = onDrop
    }

    /// Runs the step if nobody claimed it yet.
    func run() {
        step.claim()?()
    }

    deinit {
        // Unclaimed at the end: the target let go of it without running it.
        if step.claim() != nil { onDrop() }
    }
}

/// A link of a chain, seen from a waiter walking back to the step it waits for. Every call is made
/// with the chain's mutex held.
@usableFromInline
protocol ChainLink: AnyObject, Sendable {
    var previous: (any ChainLink)? { get }
    var isFinished: Bool { get }
    var pendingStep: PendingStep? { get }
}

extension ChainLink {
    /// The earliest unfinished link up to this one (this one, if the one before has finished or
    /// is no longer known): the link whose step this one waits for.
    func earliestUnfinished() -> any ChainLink {
        var earliestUnfinished: any ChainLink = self
        var link = previous
        while let current = link, !current.isFinished {
            earliestUnfinished = current
            link = current.previous
        }
        return earliestUnfinished
    }

    /// The dispatched, unstarted step of the earliest unfinished link up to this one: the step
    /// whose run this link waits for. `nil` while that link's step is not dispatched yet.
    func waitedForStep() -> PendingStep? {
        earliestUnfinished().pendingStep
    }

    /// The waited-for step, claimed, if it sits on a context the calling thread (or Swift task)
    /// holds: only this thread can run it.
    func claimStepToRunInline() -> (PendingStep, @Sendable () -> Void)? {
        guard let step = waitedForStep(), let context = step.context, ExecutionContexts.holdsIncludingTask(context),
              let work = step.claim() else { return nil }
        return (step, work)
    }
}
