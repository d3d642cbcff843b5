/// What the links of one chain share: their lock, whether the chain was cancelled, and how to fail
/// each unfinished link then.
@usableFromInline
final class ChainGroup: @unchecked Sendable {
    // Sendable: `isCancelledFlag`, `cancellers` and `nextKey` are guarded by `mutex`.
    let mutex = PThreadMutex()
    /// Broadcast when a link finishes or a step is dispatched, for waiters.
    let changed = MonotonicCondition()
    private var isCancelledFlag = false
    /// Fail each unfinished link with `CancellationError`, by the link's key. A link's entry leaves
    /// when the link finishes, so a long chain keeps only its unfinished links' entries.
    private var cancellers: [Int: @Sendable () -> Void] = [:]
    private var nextKey = 1

    var isCancelled: Bool { mutex.withLock { isCancelledFlag } }

    /// ``isCancelled``, with `mutex` held.
    var isCancelledLocked: Bool { isCancelledFlag }

    /// How many unfinished links the chain would fail if cancelled now.
    var cancellerCount: Int { mutex.withLock { cancellers.count } }

    /// Registers an unfinished link's canceller and returns its key (never 0); `nil` if the chain
    /// is cancelled already: the caller calls it then, once `mutex` is let go. `mutex` held.
    func addLocked(_ canceller: @escaping @Sendable () -> Void) -> Int? {
        guard !isCancelledFlag else { return nil }
        defer { nextKey += 1 }
        cancellers[nextKey] = canceller
        return nextKey
    }

    /// Removes a finished link's canceller and hands it back, to be released after the lock is let
    /// go. `mutex` held.
    func removeCanceller(_ key: Int) -> (@Sendable () -> Void)? {
        guard key != 0, let canceller = cancellers.removeValue(forKey: key) else { return nil }
        // A dictionary keeps its capacity: once the chain has no unfinished link, a burst of them
        // leaves no storage behind.
        if cancellers.isEmpty, cancellers.capacity > 16 { cancellers = [:] }
        return canceller
    }

    func cancel() {
        let cancellers: [@Sendable () -> Void] = mutex.withLock {
            guard !isCancelledFlag else { return [] }
            isCancelledFlag = true
            defer { self.cancellers = [:] }
            return self.cancellers.sorted { $0.key < $1.key }.map(\.value)
        }
        for canceller in cancellers { canceller() }
    }
}
