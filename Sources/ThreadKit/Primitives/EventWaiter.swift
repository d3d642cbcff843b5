/// One Swift task suspended until an event (a pool's or a thread's end, a queue's idleness),
/// without blocking a thread.
///
/// The component that owns the event keeps its waiters in an ``EventWaiters`` list under its own
/// lock. The event is decided there, when ``EventWaiters/takeAll()`` takes them out (so a wait
/// ends with `true` exactly when the component's state says the event happened before the
/// cancellation), and the tasks are resumed after that lock is let go. The waiting task's
/// cancellation ends the wait with `false` unless the event was decided first. Whichever comes
/// first decides, exactly once; a later end does nothing. An end that comes before the task has
/// suspended is kept, and the task does not suspend at all.
final class EventWaiter: Sendable {
    private enum Phase {
        /// Not suspended yet.
        case new
        case suspended(CheckedContinuation<Bool, Never>)
        /// The event happened, decided under the owner's lock; the task is yet to be resumed.
        case eventHappened(CheckedContinuation<Bool, Never>)
        /// Ended, with whether the event happened.
        case ended(Bool)
    }

    private let phase = Locked(Phase.new)

    /// Suspends until the event (``decideEventHappened()``, then ``resumeAfterEvent()``), or until
    /// the calling task is cancelled first; then calls `onCancel` (to take this waiter out of its
    /// owner's list) and returns `false`.
    ///
    /// - Returns: Whether the event happened before the cancellation.
    func wait(onCancel: @Sendable () -> Void) async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = phase.withLock { phase -> Bool? in
                    if case .ended(let happened) = phase { return happened }
                    phase = .suspended(continuation)
                    return nil
                }
                if let ended { continuation.resume(returning: ended) }
            }
        } onCancel: {
            cancel()
            onCancel()
        }
    }

    /// The event happened: the wait ends with `true`, unless its cancellation came first. Called
    /// under the owner's lock, where the event is decided; it resumes nothing (the lock is held):
    /// ``resumeAfterEvent()`` does, once that lock is let go.
    fileprivate func decideEventHappened() {
        phase.withLock { phase in
            switch phase {
            case .new: phase = .ended(true)
            case .suspended(let continuation): phase = .eventHappened(continuation)
            case .eventHappened, .ended: break
            }
        }
    }

    /// Resumes the task whose wait ``decideEventHappened()`` ended, if it had suspended. Never call
    /// it holding a lock: resuming a task may enqueue it on an executor that takes one.
    fileprivate func resumeAfterEvent() {
        let continuation = phase.withLock { phase -> CheckedContinuation<Bool, Never>? in
            guard case .eventHappened(let continuation) = phase else { return nil }
            phase = .ended(true)
            return continuation
        }
        continuation?.resume(returning: true)
    }

    /// The waiting task was cancelled: the wait ends with `false`, unless the event was decided
    /// first (then ``resumeAfterEvent()`` resumes it with `true`).
    private func cancel() {
        let continuation = phase.withLock { phase -> CheckedContinuation<Bool, Never>? in
            switch phase {
            case .new:
                phase = .ended(false)
                return nil
            case .suspended(let continuation):
                phase = .ended(false)
                return continuation
            case .eventHappened, .ended:
                return nil
            }
        }
        continuation?.resume(returning: false)
    }
}

/// The tasks waiting for one event of a component, guarded by the component's lock.
struct EventWaiters {
    private var waiters: [ObjectIdentifier: EventWaiter] = [:]

    /// How many tasks wait.
    var count: Int { waiters.count }

    /// Adds `waiter`, to be ended by the next ``takeAll()``.
    mutating func add(_ waiter: EventWaiter) {
        waiters[ObjectIdentifier(waiter)] = waiter
    }

    /// Takes out a waiter whose task was cancelled.
    mutating func remove(_ waiter: EventWaiter) {
        waiters[ObjectIdentifier(waiter)] = nil
    }

    /// Takes out every waiter, for the event, which ends each wait with `true` now (unless its
    /// cancellation came first); resume them after the component's lock is let go.
    mutating func takeAll() -> EventOccurred {
        defer { waiters = [:] }
        for waiter in waiters.values { waiter.decideEventHappened() }
        return EventOccurred(waiters: Array(waiters.values))
    }
}

/// The waiters an event took out of their list, to end once the component's lock is let go.
struct EventOccurred {
    fileprivate var waiters: [EventWaiter] = []

    /// Nobody to resume.
    static let none = EventOccurred()

    /// Adds the waiters another occurrence took out.
    mutating func append(_ other: EventOccurred) {
        waiters += other.waiters
    }

    /// Resumes every waiter: the event happened. Never call it holding a lock.
    func resumeWaiters() {
        for waiter in waiters { waiter.resumeAfterEvent() }
    }
}
