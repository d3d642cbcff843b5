import Synchronization

/// A closure its caller handed over as `sending`, made `Sendable` so that it can cross to the
/// thread that runs it, and run once.
///
/// `sending` means the caller keeps no access to the closure nor to anything it captures, even
/// non-Sendable values: they now belong to whoever holds this box, which calls the closure once,
/// on the one thread that runs the work (a pool thread, a dedicated thread, a throttled queue's
/// worker). The compiler checks the hand-over at the call, but cannot follow it into the
/// `@Sendable` closure that carries the work to that thread, hence the box.
///
/// "Once" is enforced when it runs, not by the type: the box travels inside escaping `@Sendable`
/// closures (a ``ScheduledTask``'s work, a ``RunCall``, a chain's step), and an escaping closure
/// may only borrow a `~Copyable` value it captures, never consume it, so a consuming call could
/// not be made there. The first call takes the closure out; a second stops the process.
final class SendingWork<T>: @unchecked Sendable {
    // Sendable without a lock: the closure was `sending` (nothing else reaches it or its
    // captures); only the one caller that flips `called` touches `work` after `init`, with the
    // hand-over to its thread ordered by the lock of the queue that carried the box.
    private var work: (() throws -> T)?
    private let called = Atomic(false)

    init(_ work: sending @escaping () throws -> T) {
        self.work = work
    }

    /// Calls the work, and releases it after it returns, on the calling thread (no lock held).
    /// Stops the process if called a second time.
    func callAsFunction() throws -> T {
        let (first, _) = called.compareExchange(expected: false, desired: true, ordering: .relaxed)
        precondition(first, "work handed over as 'sending' was called a second time: it runs once")
        let work = self.work.take()!
        return try work()
    }
}
