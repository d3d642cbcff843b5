/// One Swift task suspended until an event (a pool's or a thread's end, a queue's idleness),
/// without blocking a thread.
///
/// The component that owns the event keeps its waiters in an ``EventWaiters`` list under its own
/// lock, and ends them after letting that lock go: the event with `true`, the waiting task's
/// cancellation with `false`. Whichever comes first resumes the task, exactly once; a later end
/// does nothing. An end that comes before the task has suspended is kept, and the task does not
/// suspend at all.
final class EventWaiter: Sendable {
    private enum Phase {
        /// Not suspended yet.
        case new
        case suspended(CheckedContinuation<Bool, Never>)
        /// Ended, with whether the event happened.
        case ended(Bool)
    }

    private let phase = Locked(Phase.new)

    /// Suspends until ``end(eventHappened:)``, or until the calling task is cancelled; then calls
    /// `onCancel` (to take this waiter out of its owner's list) and returns `false`.
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
            end(eventHappened: false)
            onCancel()
        }
    }

    /// Ends the wait, if it has not ended: the task resumes (at once, or when it comes to suspend)
    /// and ``wait(onCancel:)`` returns `eventHappened`. Never call it holding a lock:
    /// resuming a task may enqueue it on an executor that takes one.
    func end(eventHappened: Bool) {
        let continuation = phase.withLock { phase -> CheckedContinuation<Bool, Never>? in
            switch phase {
            case .new:
                phase = .ended(eventHappened)
                return nil
            case .suspended(let continuation):
                phase = .ended(eventHappened)
                return continuation
            case .ended:
                return nil
            }
        }
        continuation?.resume(returning: eventHappened)
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

    /// Takes out every waiter, for the event: end them after the component's lock is let go.
    mutating func takeAll() -> EventOccurred {
        defer { waiters = [:] }
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
        for waiter in waiters { waiter.end(eventHappened: true) }
    }
}
