import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension ThrottledQueue {
    /// A task of a queue that the current thread (or, for ``ThrottledQueue/run(_:)``'s work, the
    /// current Swift task) is running, and the holds around it.
    ///
    /// A thread that runs a queue's task holds that queue until the task returns; a `sync` onto
    /// another queue from inside it adds a hold inside the first. The chain tells a `sync`, `run` or
    /// `waitUntilIdle()` that it comes from inside a task of its own queue (a nested call, which
    /// must not wait for the queue's turn: that turn is held by the caller), and which pool thread
    /// the caller is, to report a wait that could never end.
    ///
    /// Synchronous work has a fixed thread, so its holds live in a thread-local; async work can
    /// move between threads, so `run`'s holds travel in a task-local.
    final class Hold: @unchecked Sendable {
        // Sendable: `startedAt` is written only before the hold is shared: just before the task's
        // work, by the thread it belongs to (``withThreadHold(_:_:)``) or by `run`'s task
        // (``withTaskHold(_:_:)``), before any child task can see it; a thread's hold is only ever
        // read by that thread. `hasNestedTaskRunning` is guarded by the queue's mutex;
        // `taskRuns` is an atomic. The rest is constant.

        /// The queue whose task runs.
        let queue: ThrottledQueue
        /// When the task's own code began, for the gap before a task nested in it and after it.
        private(set) var startedAt: MonotonicInstant
        /// The pool whose thread runs the task, when the queue's worker runs it.
        let pool: ThreadPool?
        /// For `run`'s work, its ticket: a task started from a child that outlived the work is not
        /// nested in it.
        let ticket: Ticket?
        /// The hold this one is nested in.
        let outer: Hold?
        /// Whether a task nested in this one runs now (a `sync` or `run` on the same queue from
        /// inside it, or from a child task of `run`'s work). Guarded by the queue's mutex: nested
        /// tasks of one holder run one at a time, so concurrent child tasks keep the exclusion.
        var hasNestedTaskRunning = false
        /// Whether the task still runs: `false` once `run`'s work has returned. An atomic, so that
        /// ``heldContexts()`` reads it without a lock, from inside any other lock.
        private let taskRuns = Atomic<Bool>(true)

        init(queue: ThrottledQueue, pool: ThreadPool?, ticket: Ticket?, outer: Hold?, startedAt: MonotonicInstant = .now()) {
            self.queue = queue
            self.startedAt = startedAt
            self.pool = pool
            self.ticket = ticket
            self.outer = outer
        }

        /// The innermost hold of `queue`'s running task in this chain. Read under `queue`'s mutex,
        /// which guards the phase of its tickets.
        func innermost(of queue: ThrottledQueue) -> Hold? {
            var hold: Hold? = self
            while let current = hold {
                if current.queue === queue, (current.ticket?.phase ?? .granted) == .granted { return current }
                hold = current.outer
            }
            return nil
        }

        /// The queues whose running tasks this chain holds now, as serial contexts: each hold's
        /// queue while its task runs (a task that outlived `run`'s work inherited a chain whose
        /// tasks have ended, and holds nothing of it).
        ///
        /// Takes no lock: a blocking wait calls it with its own lock held.
        func heldContexts() -> [SerialContext] {
            var contexts: [SerialContext] = []
            var hold: Hold? = self
            while let current = hold {
                if current.taskRuns.load(ordering: .acquiring) { contexts.append(SerialContext(.throttled(current.queue))) }
                hold = current.outer
            }
            return contexts
        }

        /// Marks the task ended, before the queue hears of it.
        func taskEnded() {
            taskRuns.store(false, ordering: .releasing)
        }

        /// The first hold in this chain whose task runs on a thread of `pool`.
        func first(onThreadOf pool: ThreadPool) -> Hold? {
            var hold: Hold? = self
            while let current = hold {
                if current.pool === pool { return current }
                hold = current.outer
            }
            return nil
        }

        /// Runs `work`, `run`'s work, with `hold` as the current task's innermost hold, and sets the
        /// hold's `startedAt` as the last thing before `work` begins (see ``withThreadHold(_:_:)``).
        static func withTaskHold<Result: Sendable>(_ hold: Hold, _ work: () async throws -> Result) async rethrows -> Result {
            try await $ofTask.withValue(hold) {
                hold.startedAt = MonotonicInstant.now()
                return try await work()
            }
        }

        /// The holds of `run`'s work, in the current Swift task and the child tasks it starts.
        @TaskLocal static var ofTask: Hold?

        /// The holds of the current thread: one thread-local read.
        static var ofThread: Hold? {
            guard let pointer = pthread_getspecific(threadKey) else { return nil }
            return Unmanaged<Hold>.fromOpaque(pointer).takeUnretainedValue()
        }

        /// Runs `body`, a task's work, with `hold` as the current thread's innermost hold, and
        /// sets the hold's `startedAt` as the last thing before `body` begins.
        ///
        /// The nearer that reading is to the work's own first instruction, the less of the start
        /// margin the bookkeeping uses up.
        static func withThreadHold<Result>(_ hold: Hold, _ body: () throws -> Result) rethrows -> Result {
            let outer = pthread_getspecific(threadKey)
            // Unretained: `hold` lives until this call returns, and the thread-local goes back to
            // `outer` before that.
            pthread_setspecific(threadKey, Unmanaged.passUnretained(hold).toOpaque())
            defer { pthread_setspecific(threadKey, outer) }
            // The thread also holds the queue as a serial context, so that work it waits for on
            // other threads (a `DispatchMethod.sync`, a dedicated thread's `sync`) holds it too.
            return try ExecutionContexts.withHeld(SerialContext(.throttled(hold.queue))) {
                try withExtendedLifetime(hold) {
                    hold.startedAt = MonotonicInstant.now()
                    return try body()
                }
            }
        }

        private static let threadKey: pthread_key_t = {
            var key = pthread_key_t()
            let result = pthread_key_create(&key, nil)
            precondition(result == 0, "pthread_key_create failed with error \(result)")
            return key
        }()
    }
}
