/// The serial contexts each thread holds, and the blocked threads' waits: re-entry and deadlock
/// detection for every blocking wait in ThreadKit.
///
/// A thread holds a context while it runs that context's work, and also every context whose holder
/// is blocked waiting for the work it runs (a `sync` chain A → B → C hands A and B on to the thread
/// running C). Before blocking for a context:
/// 1. if the thread holds it, the work runs without waiting for the context's queue (re-entry;
///    exclusion holds, because the context's holder is blocked waiting for this thread): inline,
///    unless the context is thread-affine and another thread runs its work; that thread, blocked in
///    a wait that serves nested requests, runs it (see ``reenter(_:_:)``);
/// 2. if waiting would close a cycle among blocked threads, the process stops with a message that
///    names the cycle (deadlock);
/// 3. otherwise the thread blocks.
///
/// A thread that holds nothing pays one thread-local read (and one `getSpecific`: is it on the main
/// queue?) and never touches the shared registry: it cannot be part of a cycle.
///
/// A thread that runs a thread-affine context's work (see ``SerialContext/isThreadAffine``) waits
/// on its own ``Parker`` in ``DedicatedThread/sync(_:)`` and `DispatchMethod.sync`, serving the
/// requests that re-enter its contexts through the work it waits for.
enum ExecutionContexts {
    /// Whether the calling thread holds `context`.
    static func holds(_ context: SerialContext) -> Bool {
        if case .main = context.kind, MainQueue.isCurrent { return true }
        guard let record = Record.current else { return false }
        return record.held.contains(context)
    }

    /// Rule 1, re-entry: if the calling thread holds `context`, runs `work` for it and returns
    /// `true`; else returns `false` and does nothing.
    ///
    /// Where `work` runs (see ``ReentryPlace``): inline if this thread runs the context's work
    /// itself (it is the dedicated thread, or runs inside the queue), or if the context has no
    /// thread affinity. Reached through other contexts (A → B → A), a thread-affine context's work
    /// runs on the thread that runs A's work: that thread is blocked in a wait whose handover
    /// reached this one, and serves the request there; this thread waits, serving in turn.
    static func reenter(_ context: SerialContext, _ work: () -> Void) -> Bool {
        if case .main = context.kind, MainQueue.isCurrent {
            work()
            return true
        }
        guard let record = Record.current, let held = record.held.last(holding: context) else { return false }
        let place = ReentryPlace(
            isThreadAffine: context.isThreadAffine,
            ownerIsCaller: held.owner.toOpaque() == Unmanaged.passUnretained(record).toOpaque(),
            ownerServes: held.ownerServes)
        switch place {
        case .inline: work()
        case .owner:
            includingTaskHolds {
                ThreadActivity.current.blocked("sync", on: .context(context)) {
                    request(work, from: held.owner.takeUnretainedValue().parker, for: record)
                }
            }
        }
        return true
    }

    /// Hands `work` to the thread whose parker is `owner`, and blocks until it has run there,
    /// serving nested requests meanwhile. The work holds what this thread holds.
    private static func request(_ work: () -> Void, from owner: Parker, for record: Record) {
        let handover = Handover(caller: Unmanaged.passUnretained(record), context: nil, serving: true)
        _ = LentWork._blockingLend({ handover.run(work) }, to: { owner.post($0) })
    }

    /// Whether the calling thread runs the work of a thread-affine context it holds: nested
    /// requests for that context come to this thread, so it must wait in a way that serves them
    /// (``Completion``), and pass `serving: true` to ``handover(in:serving:)``.
    static var servesNestedRequests: Bool {
        guard let record = Record.current else { return false }
        let thread = Unmanaged.passUnretained(record).toOpaque()
        return record.held.entries.contains { $0.owner.toOpaque() == thread && $0.context.isThreadAffine }
    }

    /// Runs `body`, a blocking wait or what prepares it, with the calling thread holding the main
    /// queue if it runs on it: code that libdispatch runs there (`DispatchQueue.main.async`,
    /// code on the main thread) holds it without ThreadKit having been told.
    static func includingMainQueue<T>(_ body: () throws -> T) rethrows -> T {
        guard MainQueue.isCurrent else { return try body() }
        let main = SerialContext(.main)
        let record = Record.currentOrNew()
        guard !record.held.contains(main) else { return try body() }
        let depth = record.held.count
        record.push(main)
        defer { record.pop(to: depth) }
        return try body()
    }

    /// Runs `body`, a piece of `context`'s work, with the calling thread holding `context`.
    /// With `also`, it holds that context too (inside `context`).
    static func withHeld<T>(_ context: SerialContext, also inner: SerialContext? = nil, _ body: () throws -> T) rethrows -> T {
        let record = Record.currentOrNew()
        let depth = record.held.count
        record.push(context)
        if let inner { record.push(inner) }
        defer { record.pop(to: depth) }
        return try body()
    }

    /// What the calling thread, about to block until other work has run, hands on to that work:
    /// the contexts it holds, plus `context`, the one the work runs in. Call it inside
    /// ``includingTaskHolds(_:)``, so that what the calling Swift task holds is handed on too.
    ///
    /// - Parameter serving: Whether the caller waits in a way that serves nested requests
    ///   (``Completion``): the work may then send the caller's thread-affine contexts' work back
    ///   to it; else such work runs inline where it is asked for.
    ///
    /// A caller that holds nothing hands on no record: the thread that runs the work then need not
    /// read it, a read of memory another core wrote, on every call.
    static func handover(in context: SerialContext?, serving: Bool = false) -> Handover {
        let caller = Record.current.flatMap { $0.held.isEmpty ? nil : Unmanaged.passUnretained($0) }
        return Handover(caller: caller, context: context, serving: serving)
    }

    /// Runs `body`, a blocking wait, with the calling thread also holding what the current Swift
    /// task holds: the throttled queues whose ``ThrottledQueue/run(isolation:_:)`` work it runs. Async work
    /// may move between threads, so it holds them in a task-local, not in the thread's record; a
    /// blocking wait pins it to this thread until the wait ends, so for that long the thread holds
    /// them. Outside `run`'s work this costs one task-local read.
    ///
    /// Takes no lock, so it may be called with any lock held, and does nothing when an enclosing
    /// call has done it already: nothing is pushed while work that another thread runs for this
    /// one may be reading the record.
    ///
    /// - Parameter waitedFor: A context left out: the one the wait is for. Child tasks of one
    ///   `run`'s work share its hold, and one that waits for its siblings' turns on that queue must
    ///   not count as its holder.
    static func includingTaskHolds<T>(except waitedFor: SerialContext? = nil, _ body: () throws -> T) rethrows -> T {
        guard let holds = ThrottledQueue.Hold.ofTask, Record.current?.holdsTaskHolds != true else { return try body() }
        // A context the thread holds already it holds through a task nested in the task's: that
        // entry, the innermost, stays the one a thread it hands on to sees.
        let threadHeld = Record.current?.held
        let contexts = holds.heldContexts().filter { $0 != waitedFor && threadHeld?.contains($0) != true }
        guard !contexts.isEmpty else { return try body() }
        let record = Record.currentOrNew()
        let depth = record.held.count
        for context in contexts { record.push(context) }
        record.holdsTaskHolds = true
        defer {
            record.holdsTaskHolds = false
            record.pop(to: depth)
        }
        return try body()
    }

    /// The contexts a blocked caller hands on to the thread that runs its work (see ``handover(in:)``).
    ///
    /// It refers to the caller's record rather than copying it: the caller is blocked until the
    /// work has run, so the record stays alive and unchanged while the work reads it (a caller
    /// pushes the task's holds before it makes the handover, never after).
    struct Handover: @unchecked Sendable {
        // Sendable: the caller's record is read by the thread running the work while the caller
        // is blocked waiting for that work; the hand-off of the work orders the reads after the
        // caller's last change, and the caller changes it again only after the work has run.
        let caller: Unmanaged<Record>?
        let context: SerialContext?
        /// Whether the caller serves nested requests while it waits for this work.
        let serving: Bool

        /// Runs `body`, the caller's work, holding what the caller held and the work's context.
        ///
        /// On the caller's own thread (a `DispatchQueue.sync` on an idle queue runs there) only the
        /// work's context is added: the thread holds the rest already. Neither way allocates once
        /// the thread's stack has grown to its depth.
        func run<T>(_ body: () throws -> T) rethrows -> T {
            let callersHeld = caller?.takeUnretainedValue().held ?? .init(start: nil, count: 0)
            let current = Record.current
            let onCallersThread = current != nil && current === caller?.takeUnretainedValue()
            let added = (onCallersThread ? 0 : callersHeld.count) + (context == nil ? 0 : 1)
            guard added > 0 else { return try body() }
            let record = current ?? Record.currentOrNew()
            let depth = record.held.count
            if !onCallersThread, let caller { record.push(contentsOf: callersHeld, handedOverBy: caller, serving: serving) }
            if let context { record.push(context) }
            defer { record.pop(to: depth) }
            return try body()
        }
    }

    /// The hold of the innermost running task of `queue` that the calling thread holds, its own or
    /// handed on to it by a blocked caller; `nil` if it holds none.
    static func heldHold(of queue: ThrottledQueue) -> ThrottledQueue.Hold? {
        Record.current?.held.last(holding: SerialContext(.throttled(queue)))?.context.throttleHold
    }

    /// Makes the calling thread hold `context` for the rest of its life: a dedicated thread or the
    /// thread of a one-thread pool runs nothing but that context's work.
    static func holdForever(_ context: SerialContext) {
        Record.currentOrNew().push(context)
    }
}

/// Where re-entered work runs (rule 1 of ``ExecutionContexts``): the pure decision.
enum ReentryPlace: Equatable, Sendable {
    /// On the calling thread, at once.
    case inline
    /// On the thread that runs the context's work, which serves the request in its wait.
    case owner

    /// - Parameters:
    ///   - isThreadAffine: The context's work must run on its own thread (a dedicated thread, a
    ///     serial queue, the main queue).
    ///   - ownerIsCaller: The calling thread is the one that runs the context's work.
    ///   - ownerServes: The thread that runs the context's work waits in a way that serves nested
    ///     requests. When it does not, the work runs inline: waiting for it could never end.
    init(isThreadAffine: Bool, ownerIsCaller: Bool, ownerServes: Bool) {
        self = isThreadAffine && !ownerIsCaller && ownerServes ? .owner : .inline
    }
}
