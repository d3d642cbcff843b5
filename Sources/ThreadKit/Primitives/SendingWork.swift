/// A closure its caller handed over as `sending`, made `Sendable` so that it can cross to the
/// thread that runs it.
///
/// `sending` means the caller keeps no access to the closure nor to anything it captures, even
/// non-Sendable values: they now belong to whoever holds this box, which calls the closure once,
/// on the one thread that runs the work (a pool thread, a dedicated thread, a throttled queue's
/// worker). The compiler checks the hand-over at the call, but cannot follow it into the
/// `@Sendable` closure that carries the work to that thread, hence the box.
struct SendingWork<T>: @unchecked Sendable {
    // Sendable without a lock: the closure was `sending` (nothing else reaches it or its captures)
    // and it is called once, by one thread, with the hand-over to that thread ordered by the lock
    // of the queue that carries it.
    private let work: () throws -> T

    init(_ work: sending @escaping () throws -> T) {
        self.work = work
    }

    func callAsFunction() throws -> T {
        try work()
    }
}
