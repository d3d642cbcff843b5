/// Who holds which serial context and who waits for which, among blocked threads: the pure part of
/// deadlock detection.
///
/// A thread *holds* a context while it runs that context's work, and, transitively, every context
/// whose holder is blocked waiting for the work it runs. A wait *closes a cycle* when the context
/// waited for is held by a blocked thread that waits (directly or through further blocked threads)
/// for a context the new waiter holds. No clock, no threads: tests build graphs by hand.
///
/// Few threads are ever blocked at once, so they are kept in an array and searched linearly: no
/// hashing and, once the array has grown, no allocation on the hot path.
/// `Holds` is what a blocked thread holds: an array in tests, a view of the thread's own stack in
/// ThreadKit (read in place: the thread does not change it while it is blocked).
struct WaitGraph<Thread: Equatable & Sendable, Holds: Collection & Sendable>: Sendable
where Holds.Element: Equatable & Sendable {
    typealias Context = Holds.Element

    /// A blocked thread: what it holds and what it waits for, and, where the wait can tell,
    /// whether it is over already (its thread is about to unblock: it takes no part in cycles).
    struct Blocked: Sendable {
        var thread: Thread
        var holds: Holds
        var waitsFor: Context
        var isOver: (@Sendable () -> Bool)?
    }

    /// One hop of a cycle: `thread` holds `holds` and waits for `waitsFor`.
    struct Hop: Equatable, Sendable {
        var thread: Thread
        var holds: Context
        var waitsFor: Context
    }

    private(set) var blocked: [Blocked] = []

    /// Records that `thread` blocks, holding `holds`, until `waitsFor` runs its work.
    ///
    /// - Returns: The entry this one replaces: `thread` was blocked already, and runs work nested
    ///   in that wait (a request it serves while it waits). The caller puts it back afterwards.
    @discardableResult
    mutating func block(
        _ thread: Thread, holding holds: Holds, waitingFor waitsFor: Context, isOver: (@Sendable () -> Bool)? = nil
    ) -> Blocked? {
        let replaced = unblock(thread)
        blocked.append(Blocked(thread: thread, holds: holds, waitsFor: waitsFor, isOver: isOver))
        return replaced
    }

    /// Records that `thread` no longer waits.
    ///
    /// - Returns: Its entry, if it had one.
    @discardableResult
    mutating func unblock(_ thread: Thread) -> Blocked? {
        guard let index = blocked.firstIndex(where: { $0.thread == thread }) else { return nil }
        blocked.swapAt(index, blocked.count - 1)
        return blocked.removeLast()
    }

    /// The cycle that `thread`, holding `holds`, would close by waiting for `context`, or `nil`.
    ///
    /// The cycle starts with `thread` and ends with the hop whose thread waits for a context that
    /// `thread` holds. Only blocked threads take part: a holder that still runs will make progress,
    /// and so will one whose wait is over (the work it waited for has run; it has yet to unblock).
    func cycle(if thread: Thread, holding holds: Holds, waitsFor context: Context) -> [Hop]? {
        guard !holds.isEmpty, blocked.contains(where: { $0.holds.contains(context) }) else { return nil }
        var visited = [thread]
        /// Depth-first: from a waited-for context, through each blocked thread that holds it.
        func search(waitingFor wanted: Context, path: [Hop]) -> [Hop]? {
            for state in blocked where !visited.contains(state.thread) && state.holds.contains(wanted) && state.isOver?() != true {
                visited.append(state.thread)
                let hop = Hop(thread: state.thread, holds: wanted, waitsFor: state.waitsFor)
                if holds.contains(state.waitsFor) { return path + [hop] }
                if let found = search(waitingFor: state.waitsFor, path: path + [hop]) { return found }
            }
            return nil
        }
        guard let rest = search(waitingFor: context, path: []) else { return nil }
        // The first hop names the context of `thread`'s that the last hop's thread waits for.
        return [Hop(thread: thread, holds: rest.last!.waitsFor, waitsFor: context)] + rest
    }
}
