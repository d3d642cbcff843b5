/// What each thread holds: the stack of serial contexts whose work it runs, or runs for a blocked
/// holder, kept per thread and read in place by the threads it is handed on to.
extension ExecutionContexts {
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
        // Sendable without a lock: a view of a `Record`'s buffer, which only the owning thread
        // writes. Another thread reads it only while the owner is blocked in the wait the view
        // was made for: the registry under its lock (`Registry.shared`), which the owner takes
        // after its last push and before blocking, or the thread running the owner's handed-over
        // work, which the hand-off (a queue's or a parker's lock, or the submission's) orders
        // after that push. The owner writes again only once its wait has ended, which the
        // completion it waited for (an atomic or a lock, acquiring) orders after those reads;
        // a buffer outgrown while the registry viewed it is kept until its entry changes.
        let entries: UnsafeBufferPointer<Held>

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

        /// Each thread's record, released when the thread exits.
        private static let perThread = ThreadLocalObject<Record>()

        static var current: Record? {
            perThread.current
        }

        static func currentOrNew() -> Record {
            if let record = perThread.current { return record }
            let record = Record()
            perThread.current = record
            return record
        }
    }
}
