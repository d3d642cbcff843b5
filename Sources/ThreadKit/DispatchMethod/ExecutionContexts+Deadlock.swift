import Foundation

/// Rule 2 of ``ExecutionContexts``: the registry of blocked threads that hold something, and the
/// check, before a thread blocks, that its wait does not close a cycle among them.
extension ExecutionContexts {
    /// Runs `wait`, a blocking wait for work that `context` will run, after checking that it can
    /// end: stops the process if the wait would close a cycle of blocked threads.
    ///
    /// Call it only after the re-entry check (the thread does not hold `context`).
    ///
    /// - Parameters:
    ///   - kind: The wait's kind, as ``Diagnostics`` reports the thread meanwhile: `"sync"`,
    ///     `"wait"` (for a task), `"full queue"`.
    ///   - isOver: Whether the work waited for has run already, where the wait can tell (an
    ///     atomic read, asked under the registry's lock): such a wait is not registered, and an
    ///     entry whose wait is over takes no part in other waits' cycles. Without it, a wait that
    ///     registers after its work may have run (a `sync` that watched first) could meet, in its
    ///     check, a wait that the same work's thread began afterwards: a cycle that never was.
    static func blocking<T>(
        for context: SerialContext, kind: String = "sync", isOver: (@Sendable () -> Bool)? = nil, _ wait: () throws -> T
    ) rethrows -> T {
        try ThreadActivity.current.blocked(kind, on: .context(context)) {
            try includingMainQueue { try includingTaskHolds(except: context) { try register(waitFor: context, isOver: isOver, wait) } }
        }
    }

    /// What registering a wait did: nothing (its work has run), or an entry, with the one it
    /// replaced (a thread serving a nested request while blocked in an outer wait).
    private enum Registration {
        case skipped
        case registered(outer: WaitGraph<ThreadKey, HeldContexts>.Blocked?)
    }

    /// ``blocking(for:kind:isOver:_:)`` once the task's holds are on the thread's record.
    private static func register<T>(
        waitFor context: SerialContext, isOver: (@Sendable () -> Bool)?, _ wait: () throws -> T
    ) rethrows -> T {
        guard let record = Record.current, record.held.count > 0 else { return try wait() }
        let thread = ThreadKey(record)
        // The registry keeps a view of the record's buffer (see `Record`).
        let held = record.held
        // A thread that serves a nested request while blocked in an outer wait is registered
        // already: its outer entry comes back once this wait ends.
        let registered = Registry.shared.withLock { graph -> Result<Registration, Deadlock> in
            if isOver?() == true { return .success(.skipped) }
            if let cycle = graph.cycle(if: thread, holding: held, waitsFor: context) {
                return .failure(Deadlock(message: message(for: cycle)))
            }
            return .success(.registered(outer: graph.block(thread, holding: held, waitingFor: context, isOver: isOver)))
        }
        // Stopped outside the registry's lock: the threads' list the message ends with reads it.
        let outer: WaitGraph<ThreadKey, HeldContexts>.Blocked?
        switch registered {
        case .failure(let deadlock): deadlock.stop()
        case .success(.skipped): return try wait()
        case .success(.registered(let entry)): outer = entry
        }
        record.registrationChanged(isRegistered: true)
        defer {
            Registry.shared.withLock { graph in
                if let outer {
                    // Viewed afresh: the buffer the outer entry viewed may have been outgrown.
                    _ = graph.block(thread, holding: record.held(first: outer.holds.count), waitingFor: outer.waitsFor, isOver: outer.isOver)
                } else {
                    _ = graph.unblock(thread)
                }
            }
            record.registrationChanged(isRegistered: outer != nil)
        }
        return try wait()
    }

    /// A wait that would close a cycle: the process stops, after writing the message and what
    /// every thread ThreadKit knows is doing to standard error.
    ///
    /// Not the whole ``Diagnostics/snapshot(longWaitsOver:)``: the stopping thread may hold a
    /// component's lock (a pool's, in a wait for room in its queue), which the snapshot would take.
    private struct Deadlock: Error {
        let message: String

        func stop() -> Never {
            let threads = Diagnostics.threadsText()
            FileHandle.standardError.write(Data("ThreadKit \(message)\n\nThreads:\n\(threads)".utf8))
            preconditionFailure(message)
        }
    }

    /// A thread in the registry: its record's identity, and its name for messages.
    struct ThreadKey: Equatable, Sendable {
        let id: ObjectIdentifier
        let name: String

        init(_ record: Record) {
            id = ObjectIdentifier(record)
            name = record.threadName
        }

        init(id: ObjectIdentifier, name: String) {
            self.id = id
            self.name = name
        }

        static func == (lhs: ThreadKey, rhs: ThreadKey) -> Bool { lhs.id == rhs.id }
    }

    /// `deadlock: thread "T1" holds DedicatedThread "db" and waits for ThrottledQueue "api", held by
    /// thread "T2", which waits for "db"`.
    static func message(for cycle: [WaitGraph<ThreadKey, HeldContexts>.Hop]) -> String {
        let first = cycle[0]
        var text = "deadlock: thread \"\(first.thread.name)\" holds \(first.holds) and waits for \(first.waitsFor)"
        for hop in cycle.dropFirst() {
            let waitsFor = hop.waitsFor == first.holds ? hop.waitsFor.shortDescription : hop.waitsFor.description
            text += ", held by thread \"\(hop.thread.name)\", which waits for \(waitsFor)"
        }
        return text
    }

    /// The names of the threads blocked now in a wait that takes part in deadlock detection (for
    /// tests: a scenario waits for a thread to block before it goes on).
    static var blockedThreadNames: [String] {
        Registry.shared.withLock { graph in graph.blocked.map(\.thread.name) }
    }

    /// The blocked threads that hold something, shared by all of them.
    private enum Registry {
        static let shared = Locked(WaitGraph<ThreadKey, HeldContexts>())
    }
}
