import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Something that runs one piece of work at a time: the main queue, a serial `DispatchQueue`, a
/// ``DedicatedThread``, a ``ThrottledQueue`` or a ``ThreadPool`` of size 1.
struct SerialContext: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Sendable {
        case main
        case queue(DispatchQueue)
        /// A dedicated thread's core, which its thread holds: never the ``DedicatedThread`` itself,
        /// which the thread must not keep alive.
        case thread(DedicatedThreadCore)
        case throttled(ThrottledQueue)
        /// The turn of the tasks nested in one running task of a throttled queue (its `sync` and
        /// `run` calls on the same queue): the concurrent child tasks of `run`'s work take it one
        /// at a time. Held by the thread or task that runs such a nested task.
        case nestedTurn(ThrottledQueue.Hold)
        case pool(ThreadPool)
    }

    let kind: Kind
    fileprivate let id: ObjectIdentifier
    /// For a throttled queue held by running one of its tasks: that task's hold, so that a thread
    /// the context is handed on to nests its own calls on the queue in that task, as the holder
    /// would. Not part of the identity.
    let throttleHold: ThrottledQueue.Hold?

    init(_ kind: Kind, hold: ThrottledQueue.Hold? = nil) {
        self.kind = kind
        throttleHold = hold
        switch kind {
        case .main: id = MainQueue.identity
        case .queue(let queue): id = ObjectIdentifier(queue)
        case .thread(let thread): id = ObjectIdentifier(thread)
        case .throttled(let queue): id = ObjectIdentifier(queue)
        case .nestedTurn(let holder): id = ObjectIdentifier(holder)
        case .pool(let pool): id = ObjectIdentifier(pool)
        }
    }

    static func == (lhs: SerialContext, rhs: SerialContext) -> Bool { lhs.id == rhs.id }

    /// Whether the context's work must run on one particular thread: a dedicated thread's on that
    /// thread, a queue's on the thread that runs inside the queue (where `getSpecific` and an
    /// actor's isolation check see it). A pool of size 1 and a throttled queue only promise one
    /// piece of work at a time, wherever it runs.
    var isThreadAffine: Bool {
        switch kind {
        case .main, .queue, .thread: true
        case .throttled, .nestedTurn, .pool: false
        }
    }

    func hash(into hasher: inout Hasher) { hasher.combine(id) }

    var description: String {
        switch kind {
        case .main: "the main queue"
        case .queue(let queue): "DispatchQueue \"\(queue.label)\""
        case .thread(let thread): "DedicatedThread \"\(thread.name)\""
        case .throttled(let queue): "ThrottledQueue \"\(queue.label)\""
        // Named as its queue: waiting for the nested turn is waiting for the queue, to its user.
        case .nestedTurn(let holder): "ThrottledQueue \"\(holder.queue.label)\""
        case .pool(let pool): "ThreadPool \"\(pool.name)\""
        }
    }

    /// The name alone, quoted, for the end of a deadlock message.
    var shortDescription: String {
        switch kind {
        case .main: "the main queue"
        case .queue(let queue): "\"\(queue.label)\""
        case .thread(let thread): "\"\(thread.name)\""
        case .throttled(let queue): "\"\(queue.label)\""
        case .nestedTurn(let holder): "\"\(holder.queue.label)\""
        case .pool(let pool): "\"\(pool.name)\""
        }
    }
}

/// The main queue's one identity, and whether the calling code runs on it.
///
/// On Linux every read of `DispatchQueue.main` makes a new wrapper object, so neither its identity
/// nor the thread tells the main queue apart: after `dispatchMain()` its work runs on worker
/// threads, and a freed wrapper's address is soon another queue's. As libdispatch-based libraries
/// do, the main queue carries a specific of ours, which only code running on it sees.
enum MainQueue {
    /// Stands for the main queue: the object whose identity a main-queue context has.
    private final class Marker: Sendable {}

    private static let marker = Marker()

    /// The identity of every ``SerialContext`` of the main queue.
    static let identity = ObjectIdentifier(marker)

    /// Set on the main queue once, on first use; libdispatch's specifics are thread-safe.
    private static let key: DispatchSpecificKey<Marker> = {
        let key = DispatchSpecificKey<Marker>()
        DispatchQueue.main.setSpecific(key: key, value: marker)
        return key
    }()

    /// Whether the calling code runs on the main queue: on the main thread before `dispatchMain()`
    /// (libdispatch counts its code as the main queue's), or in main-queue work, wherever it runs.
    static var isCurrent: Bool {
        DispatchQueue.getSpecific(key: key) != nil
    }
}

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
        case .owner: includingTaskHolds { request(work, from: held.owner.takeUnretainedValue().parker, for: record) }
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
    static func handover(in context: SerialContext?, serving: Bool = false) -> Handover {
        Handover(caller: Record.current.map(Unmanaged.passUnretained), context: context, serving: serving)
    }

    /// Runs `body`, a blocking wait, with the calling thread also holding what the current Swift
    /// task holds: the throttled queues whose ``ThrottledQueue/run(_:)`` work it runs. Async work
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
        fileprivate let caller: Unmanaged<Record>?
        fileprivate let context: SerialContext?
        /// Whether the caller serves nested requests while it waits for this work.
        fileprivate let serving: Bool

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

    /// Runs `wait`, a blocking wait for work that `context` will run, after checking that it can
    /// end: stops the process if the wait would close a cycle of blocked threads.
    ///
    /// Call it only after the re-entry check (the thread does not hold `context`).
    static func blocking<T>(for context: SerialContext, _ wait: () throws -> T) rethrows -> T {
        try includingMainQueue { try includingTaskHolds(except: context) { try register(waitFor: context, wait) } }
    }

    /// ``blocking(for:_:)`` once the task's holds are on the thread's record.
    private static func register<T>(waitFor context: SerialContext, _ wait: () throws -> T) rethrows -> T {
        guard let record = Record.current, record.held.count > 0 else { return try wait() }
        let thread = ThreadKey(record)
        // The registry keeps a view of the record's buffer (see `Record`).
        let held = record.held
        // A thread that serves a nested request while blocked in an outer wait is registered
        // already: its outer entry comes back once this wait ends.
        let outer = Registry.shared.withLock { graph in
            if let cycle = graph.cycle(if: thread, holding: held, waitsFor: context) {
                preconditionFailure(message(for: cycle))
            }
            return graph.block(thread, holding: held, waitingFor: context).map { (count: $0.holds.count, waitsFor: $0.waitsFor) }
        }
        record.registrationChanged(isRegistered: true)
        defer {
            Registry.shared.withLock { graph in
                if let outer {
                    // Viewed afresh: the buffer the outer entry viewed may have been outgrown.
                    _ = graph.block(thread, holding: record.held(first: outer.count), waitingFor: outer.waitsFor)
                } else {
                    _ = graph.unblock(thread)
                }
            }
            record.registrationChanged(isRegistered: outer != nil)
        }
        return try wait()
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

    /// The blocked threads that hold something, shared by all of them.
    private enum Registry {
        static let shared = Locked(WaitGraph<ThreadKey, HeldContexts>())
    }

    /// A held context, and which thread runs its work.
    struct Held {
        let context: SerialContext
        /// The record of the thread that runs the context's work (it is the dedicated thread, or
        /// runs inside the queue): where nested requests for a thread-affine context go. Blocked
        /// for as long as another thread holds the context through it, so it stays alive.
        let owner: Unmanaged<Record>
        /// Whether `owner` waits in a way that serves nested requests (see ``Handover``).
        let ownerServes: Bool
    }

    /// A thread's held contexts, innermost last, read in place.
    struct HeldContexts: RandomAccessCollection, @unchecked Sendable {
        // Sendable: read by other threads only while the owning thread is blocked (see `Record`).
        fileprivate let entries: UnsafeBufferPointer<Held>

        init(start: UnsafePointer<Held>?, count: Int) {
            entries = UnsafeBufferPointer(start: start, count: count)
        }

        var startIndex: Int { 0 }
        var endIndex: Int { entries.count }
        subscript(position: Int) -> SerialContext { entries[position].context }

        /// Whether `context` is among them: compares identities in place, copying no context.
        func contains(_ context: SerialContext) -> Bool {
            entries.contains { $0.context.id == context.id }
        }

        /// The innermost entry for `context`, if it is among them.
        func last(holding context: SerialContext) -> Held? {
            entries.last { $0.context.id == context.id }
        }
    }

    /// One thread's held contexts, kept in a thread-specific slot from the first hold to the thread's end.
    ///
    /// The contexts sit in a buffer of the record's own that grows and never shrinks, so holding
    /// and letting go allocate nothing once a thread has reached its usual depth. Other threads
    /// read a view of the buffer only while the owner is blocked: a ``Handover``, and the registry
    /// under its lock. One case needs care: a `DispatchQueue.sync` that runs its work on the
    /// waiting thread itself lets the owner push while its registry entry still views the buffer.
    /// If the buffer must grow then, the old one is kept, contents and all, until the owner's entry
    /// changes; otherwise it is freed at once.
    final class Record {
        let threadName: String
        /// Where this thread sleeps in its serving waits, and receives nested requests.
        let parker = Parker()
        private var base: UnsafeMutablePointer<Held>
        private var capacity = 4
        private var count = 0
        /// Buffers outgrown while the registry viewed them, and how many contexts each holds.
        private var outgrown: [(base: UnsafeMutablePointer<Held>, count: Int)] = []
        /// Whether the registry has an entry for this thread, viewing the buffer.
        private var isRegistered = false
        /// Whether ``includingTaskHolds(_:)`` has pushed the current task's holds.
        var holdsTaskHolds = false

        private init() {
            threadName = NamedThread.currentName()
            base = .allocate(capacity: capacity)
        }

        deinit {
            base.deinitialize(count: count)
            base.deallocate()
            releaseOutgrown()
        }

        /// What the thread holds now. Only the owning thread changes it; another thread may read it
        /// while the owner is blocked (a ``Handover``, or the registry under its lock).
        var held: HeldContexts { HeldContexts(start: base, count: count) }

        /// The outermost `prefix` held contexts, viewed in the current buffer.
        func held(first prefix: Int) -> HeldContexts { HeldContexts(start: base, count: min(prefix, count)) }

        /// Holds `context`, whose work this thread runs.
        func push(_ context: SerialContext) {
            reserve(count + 1)
            (base + count).initialize(to: Held(context: context, owner: Unmanaged.passUnretained(self), ownerServes: false))
            count += 1
        }

        /// Holds what `caller`, blocked until this thread has run its work, holds; the contexts
        /// whose work `caller` runs are served by it if it waits `serving`.
        func push(contentsOf contexts: HeldContexts, handedOverBy caller: Unmanaged<Record>, serving: Bool) {
            guard !contexts.isEmpty else { return }
            reserve(count + contexts.count)
            for (offset, entry) in contexts.entries.enumerated() {
                let ownerServes = entry.owner.toOpaque() == caller.toOpaque() ? serving : entry.ownerServes
                (base + count + offset).initialize(to: Held(context: entry.context, owner: entry.owner, ownerServes: ownerServes))
            }
            count += contexts.count
        }

        /// Lets go of everything held since the stack was `depth` deep.
        func pop(to depth: Int) {
            (base + depth).deinitialize(count: count - depth)
            count = depth
        }

        /// The owner's registry entry was made, replaced or removed: no entry views an outgrown
        /// buffer any more. Call it after the registry's lock is let go: the contexts released here
        /// may be the last references to their objects.
        func registrationChanged(isRegistered: Bool) {
            self.isRegistered = isRegistered
            releaseOutgrown()
        }

        private func reserve(_ needed: Int) {
            guard needed > capacity else { return }
            let newCapacity = max(needed, capacity * 2)
            let newBase = UnsafeMutablePointer<Held>.allocate(capacity: newCapacity)
            if isRegistered {
                newBase.initialize(from: base, count: count)
                outgrown.append((base, count))
            } else {
                newBase.moveInitialize(from: base, count: count)
                base.deallocate()
            }
            base = newBase
            capacity = newCapacity
        }

        private func releaseOutgrown() {
            for buffer in outgrown {
                buffer.base.deinitialize(count: buffer.count)
                buffer.base.deallocate()
            }
            outgrown.removeAll()
        }

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            let result = pthread_key_create(&key) { value in
                Unmanaged<Record>.fromOpaque(value!).release()
            }
            precondition(result == 0, "pthread_key_create failed with error \(result)")
            return key
        }()

        static var current: Record? {
            pthread_getspecific(key).map { Unmanaged<Record>.fromOpaque($0).takeUnretainedValue() }
        }

        static func currentOrNew() -> Record {
            if let record = current { return record }
            let record = Record()
            pthread_setspecific(key, Unmanaged.passRetained(record).toOpaque())
            return record
        }
    }
}
