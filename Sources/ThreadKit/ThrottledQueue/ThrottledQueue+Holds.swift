#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension ThrottledQueue {
    /// A task of a queue that the current thread (or, for ``ThrottledQueue/run(isolation:_:)``'s work, the
    /// current Swift task) is running, and the holds around it.
    ///
    /// A thread that runs a queue's task holds that queue until the task returns; a `sync` onto
    /// another queue from inside it adds a hold inside the first. The chain tells a `sync`, `run` or
    /// `waitUntilIdle()` that it comes from inside a task of its own queue (a nested call, which
    /// must not wait for the queue's turn: that turn is held by the caller), and which pool thread
    /// the caller is, to report a wait that could never end.
    ///
    /// Synchronous work has a fixed thread, so its holds live in a thread-local; async work can
    /// move between threads, so `run`'s holds travel in a task-local, honoured only by the task
    /// that runs `run` and its structured child tasks (see ``ofTask``).
    final class Hold: @unchecked Sendable {
        // Sendable: `startedAt` and `binding` are written only before the hold is shared: just
        // before the task's work, by the thread it belongs to (``withThreadHold(_:_:)``) or by
        // `run`'s task (``withTaskHold(_:_:)``), before any other task can see it; a thread's hold
        // is only ever read by that thread. `hasNestedTaskRunning` is guarded by the queue's mutex.
        // The rest is constant.

        /// The queue whose task runs.
        let queue: ThrottledQueue
        /// When the task's own code began, for the gap before a task nested in it and after it.
        private(set) var startedAt: MonotonicInstant
        /// The pool whose thread runs the task, when the queue's worker runs it.
        let pool: ThreadPool?
        /// For `run`'s work: where the task-local binding of this hold lives (see ``ofTask``).
        private var binding: UnsafeMutableRawPointer?
        /// The hold this one is nested in.
        let outer: Hold?
        /// The hold of the running task of the same queue whose nested turn this task takes (a
        /// `sync` or `run` on the queue from inside that task), if it is nested.
        let nestedIn: Hold?
        /// Whether a task nested in this one runs now (a `sync` or `run` on the same queue from
        /// inside it, or from a child task of `run`'s work). Guarded by the queue's mutex: nested
        /// tasks of one holder run one at a time, so concurrent child tasks keep the exclusion.
        var hasNestedTaskRunning = false

        init(queue: ThrottledQueue, pool: ThreadPool?, outer: Hold?, nestedIn: Hold? = nil, startedAt: MonotonicInstant = .now()) {
            self.queue = queue
            self.startedAt = startedAt
            self.pool = pool
            self.outer = outer
            self.nestedIn = nestedIn
        }

        /// The serial contexts that running this hold's task holds: its queue, and the nested
        /// turn it takes, if it is nested.
        func contexts(into contexts: inout [SerialContext]) {
            contexts.append(SerialContext(.throttled(queue), hold: self))
            if let nestedIn { contexts.append(SerialContext(.nestedTurn(nestedIn))) }
        }

        /// This hold and the ones it is nested in, innermost first.
        private var chain: UnfoldFirstSequence<Hold> {
            sequence(first: self, next: \.outer)
        }

        /// The innermost hold of `queue`'s running task in this chain.
        func innermost(of queue: ThrottledQueue) -> Hold? {
            chain.first { $0.queue === queue }
        }

        /// The queues whose running tasks this chain holds, and the nested turns they take, as
        /// serial contexts.
        ///
        /// Takes no lock: a blocking wait calls it with its own lock held.
        func heldContexts() -> [SerialContext] {
            var contexts: [SerialContext] = []
            for hold in chain { hold.contexts(into: &contexts) }
            return contexts
        }

        /// The first hold in this chain whose task runs on a thread of `pool`.
        func first(onThreadOf pool: ThreadPool) -> Hold? {
            chain.first { $0.pool === pool }
        }

        /// Runs `work`, `run`'s work, with `hold` as the current task's innermost hold, and sets the
        /// hold's `startedAt` as the last thing before `work` begins (see ``withThreadHold(_:_:)``).
        static func withTaskHold<Result>(
            _ hold: Hold, isolation: isolated (any Actor)? = #isolation, _ work: () async throws -> Result
        ) async rethrows -> Result {
            try await $bound.withValue(hold) {
                hold.binding = bindingStorage()
                hold.startedAt = MonotonicInstant.now()
                return try await work()
            }
        }

        /// The holds of `run`'s work, as the current Swift task sees them: in the task that runs
        /// `run` and in the structured child tasks it starts (`async let`, task groups), never in an
        /// unstructured `Task` started inside the work, nor after the work has returned.
        ///
        /// Every task inherits the task-local that carries the hold, but not in the same way
        /// (SE-0311): a structured child task reads its parent's bindings in place, where an
        /// unstructured `Task` gets copies of them. So a hold counts only where its binding is
        /// found at the very place `run` made it. An unstructured task is a separate piece of work
        /// that may outlive the run: it waits for its turn like any other caller, and is never
        /// taken for the holder (which would overlap it with the work, or report a false deadlock).
        static var ofTask: Hold? {
            guard let hold = bound, let binding = hold.binding, binding == bindingStorage() else { return nil }
            return hold
        }

        /// The binding of `run`'s holds, as inherited by every task started inside the work: read
        /// it through ``ofTask``.
        @TaskLocal private static var bound: Hold?

        /// Where the current task finds its binding of ``bound``: the same address in the task that
        /// bound it and in its structured child tasks, another in an unstructured task's copy.
        private static func bindingStorage() -> UnsafeMutableRawPointer? {
            // A task-local's key is its `TaskLocal` object; the runtime returns where the value lives.
            swiftTaskLocalValueGet(UnsafeRawPointer(Unmanaged.passUnretained($bound).toOpaque()))
        }

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
            // The thread also holds the queue (and the nested turn it takes) as serial contexts,
            // so that work it waits for on other threads (a `DispatchMethod.sync`, a dedicated
            // thread's `sync`) holds them too, and nests its calls on the queue in this task.
            let turn = hold.nestedIn.map { SerialContext(.nestedTurn($0)) }
            return try ExecutionContexts.withHeld(SerialContext(.throttled(hold.queue), hold: hold), also: turn) {
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

/// The Swift runtime's lookup of a task-local value, which `TaskLocal.get()` calls: it returns the
/// address of the current task's binding for `key` (a `TaskLocal` object), or `nil`.
@_silgen_name("swift_task_localValueGet")
private func swiftTaskLocalValueGet(_ key: UnsafeRawPointer) -> UnsafeMutableRawPointer?

extension ThrottledQueue.Hold {
    /// Whether the calling Swift task holds `context`: it runs the work of a
    /// ``ThrottledQueue/run(isolation:_:)`` on that queue (or a structured child task of that work does).
    static func taskHolds(_ context: SerialContext) -> Bool {
        guard case .throttled = context.kind, let holds = ofTask else { return false }
        return holds.heldContexts().contains(context)
    }
}

extension ThrottledQueue {
    /// When this queue started the task that the calling thread (or Swift task) runs: the instant
    /// it recorded right before the task's own code began, on the thread that runs it, and counts
    /// the gaps and the rate limit from. `nil` outside this queue's tasks. A duration since the
    /// origin of `CLOCK_MONOTONIC`, so only differences between two readings mean anything.
    ///
    /// It is where the promise that no task starts early is kept: two of these instants are never
    /// closer than the rules allow. A clock reading in the task's first line comes later, by as
    /// long as the thread was kept off its core in between, which nothing can prevent; two such
    /// readings can be closer (see "What never early means" in Docs/ThrottledQueue.md).
    ///
    /// SPI (`@_spi(ThreadKitTools)`), for the package's benchmark and tests, which check that
    /// promise where it is made; it is not part of the public API.
    @_spi(ThreadKitTools)
    public var startOfCurrentTask: Duration? {
        (Hold.ofThread?.innermost(of: self) ?? Hold.ofTask?.innermost(of: self))
            .map { .nanoseconds(Int64(clamping: $0.startedAt.nanoseconds)) }
    }
}

extension ExecutionContexts {
    /// Whether the calling thread holds `context`, or the calling Swift task does (see
    /// ``ThrottledQueue/Hold/taskHolds(_:)``): either way, work queued on `context` that the caller
    /// blocks for can only run on the caller.
    static func holdsIncludingTask(_ context: SerialContext) -> Bool {
        holds(context) || ThrottledQueue.Hold.taskHolds(context)
    }
}
