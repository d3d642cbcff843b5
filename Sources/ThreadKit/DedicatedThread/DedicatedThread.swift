/// One named thread that runs work in FIFO order, for thread-affine resources and as an actor's executor.
///
/// Closures (``execute(_:)``, ``sync(_:)``, ``run(_:)``) and Swift jobs (an actor whose executor it
/// is, or tasks that prefer it) share one queue and run one at a time, in the order they arrived, on
/// the one thread, whose identity never changes: a SQLite connection or a C library with
/// thread-local state can live on it. The thread starts at once and lives until disposed, or until
/// nothing references this object any more: then it runs what is queued and exits, as after
/// ``dispose()``. While it has nothing to do, or is paused, it sleeps on a condition and uses no CPU.
///
/// ```swift
/// let db = DedicatedThread(name: "SQLite")
/// try db.execute { connection.vacuum() }
/// let count = db.sync { connection.count() }
/// actor Store {
///     let thread = DedicatedThread(name: "Store")
///     nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }
/// }
/// ```
///
/// **Arguments.** The one number it takes is ``awaitTermination(timeout:)``'s timeout. Zero is a
/// time already up: the call checks once without waiting (GCD's and Java's rule for timed waits);
/// one however far out waits as long as it takes. A negative one cannot work: it stops with a
/// precondition failure naming the thread, the timeout and the value (ThreadKit's design rule: a
/// negative duration means "now" only for a pause or a `Retry-After` date).
public final class DedicatedThread: SerialExecutor, TaskExecutor, Sendable {
    /// The thread's name, for `Thread.current.name` (the kernel keeps its first 15 bytes), log
    /// records and errors.
    public let name: String

    /// The queue and the thread; what the thread holds on to, rather than this front.
    let core: DedicatedThreadCore

    /// Creates the thread and starts it at once.
    ///
    /// If the system refuses to start a thread, the failure is kept: ``execute(_:)`` and ``run(_:)``
    /// throw ``DedicatedThreadError/threadStartFailed(name:errno:)``, and ``sync(_:)`` or a Swift
    /// job stops the process with a message naming the thread.
    ///
    /// - Parameter name: Names the thread, its log lines and errors.
    public init(name: String) {
        self.name = name
        core = DedicatedThreadCore(name: name)
        DiagnosticsRegistry.add(self)
    }

    deinit {
        DiagnosticsRegistry.remove(ObjectIdentifier(self))
        core.release()
    }

    // MARK: - Submitting work

    /// Runs `work` on the thread, after everything submitted before it.
    ///
    /// `work` stays `@Sendable` (``run(_:)``'s is `sending`): nobody waits for it, and
    /// ``disposeNow()`` may drop it on whichever thread calls it.
    ///
    /// - Throws: ``DedicatedThreadError/disposed(name:)`` after ``dispose()`` or ``disposeNow()``.
    public func execute(_ work: @escaping @Sendable () -> Void) throws {
        try core.execute(work)
    }

    /// Runs `work` on the thread and returns its result, blocking the calling thread until then.
    ///
    /// Called on the thread itself, it runs `work` at once, inline: waiting for itself could never
    /// end. Called from work this thread is blocked waiting for (A → B → A: this thread's work
    /// called `sync` onto B, and B's work calls this), `work` still runs on this thread, which
    /// serves it in its wait, and the caller waits for it. Called from elsewhere, `work` runs after
    /// everything submitted before it. The thread must be running: a `sync` on a disposed thread,
    /// or while the thread is paused and nothing will resume it, cannot return. The first stops
    /// the process with a message naming the thread.
    ///
    /// It blocks the calling thread, so async code awaits ``run(_:)`` instead.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw.
    @available(*, noasync, message: "it blocks the thread; use 'try await run { }' in async code")
    public func sync<T>(_ work: () throws -> T) rethrows -> T {
        try core.sync(work)
    }

    /// Like ``sync(_:)``, but a refusal (a disposed thread, or one that never started) is thrown.
    func syncOrThrow<T>(_ work: () throws -> T) throws -> T {
        try core.syncOrThrow(work)
    }

    /// Runs `work` on the thread and suspends (without blocking a thread) until it has run.
    ///
    /// `work` is `sending`: it runs once, on this thread, so it may use non-Sendable values the
    /// caller made and hands over (code on an actor can pass a value it created, and no longer
    /// touches it); it cannot use the caller's actor-isolated state, which lives elsewhere.
    ///
    /// If the calling task is already cancelled, the work is not submitted; if it is cancelled
    /// before the thread starts the work, the work never starts (its closure is released at once)
    /// and this throws `CancellationError`. Once started, the work runs to its end and this
    /// returns its result.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, `CancellationError`, or ``DedicatedThreadError/disposed(name:)``
    ///   if the thread was disposed before it ran (``disposeNow()`` drops it; later calls are refused).
    public func run<T: Sendable>(_ work: sending @escaping () throws -> T) async throws -> T {
        try await core.run(SendingWork(work))
    }

    /// Runs a Swift concurrency job on the thread, in FIFO order with the closures.
    ///
    /// This makes the thread an actor's executor (`thread.asUnownedSerialExecutor()`) and a task
    /// executor (`withTaskExecutorPreference(thread) { … }`). A job cannot move elsewhere without
    /// breaking an actor's isolation, so a job that arrives after ``dispose()`` stops the process
    /// with a message naming the thread.
    public func enqueue(_ job: consuming ExecutorJob) {
        core.enqueue(job)
    }

    /// The executor that actors using this thread see: its core, which the thread's Swift jobs
    /// reference instead of this object, so that they never keep it alive.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: core)
    }

    /// The task executor that tasks preferring this thread see: its core, as for
    /// ``asUnownedSerialExecutor()``.
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: core)
    }

    /// Stops the process unless called on this thread: an actor's isolation check.
    public func checkIsolated() {
        core.checkIsolated()
    }

    // MARK: - Controlling

    /// After the item running now, starts nothing until ``resume()``. Work may still be submitted;
    /// it waits in the queue while the thread sleeps. A disposed thread ignores it.
    public func pause() {
        core.pause()
    }

    /// Lets a paused thread take the next item again.
    public func resume() {
        core.resume()
    }

    /// Whether the thread is paused.
    public var isPaused: Bool {
        core.isPaused
    }

    /// Whether the calling thread is this thread.
    public var isCurrent: Bool {
        core.isCurrent
    }

    /// Stops the process unless called on this thread, with a message naming it and the caller.
    public func preconditionIsCurrent(file: StaticString = #fileID, line: UInt = #line) {
        precondition(
            isCurrent, "expected to run on DedicatedThread '\(name)', but running on thread '\(NamedThread.currentName())'",
            file: file, line: line)
    }

    /// Refuses new work, runs everything already queued, then lets the thread exit.
    ///
    /// A paused thread resumes to do so. Returns at once; ``awaitTermination(timeout:)`` waits for
    /// the end. Calling it again does nothing.
    public func dispose() {
        core.dispose()
    }

    /// Refuses new work, drops the queued closures, and lets the thread exit after the item running now.
    ///
    /// Dropped ``execute(_:)`` closures never run; dropped ``run(_:)`` callers throw
    /// ``DedicatedThreadError/disposed(name:)``. Queued Swift jobs and ``sync(_:)`` calls still run
    /// first: a job belongs to a task that would otherwise wait forever, and a `sync` caller is
    /// blocked waiting for its result. Closures are released after the thread's lock is let go.
    ///
    /// - Returns: How many queued closures will never run; 0 if the thread was already stopped.
    @discardableResult
    public func disposeNow() -> Int {
        core.disposeNow()
    }

    /// Blocks until the thread has exited after a dispose, or `timeout` has passed.
    ///
    /// It blocks the calling thread, so async code awaits ``awaitTermination()`` instead.
    ///
    /// - Parameter timeout: The longest to wait; not negative. Zero: it checks once and does not
    ///   wait (as Java's `ExecutorService.awaitTermination` does); far out: as long as it takes.
    /// - Returns: `true` once the thread is gone (or never started), `false` on timeout, and always
    ///   `false` while it was not disposed.
    @available(*, noasync, message: "it blocks the thread; use 'await awaitTermination()' in async code")
    public func awaitTermination(timeout: Duration) -> Bool {
        core.awaitTermination(timeout: timeout)
    }

    /// Suspends, without blocking a thread, until the thread has exited after a dispose.
    ///
    /// The async twin of ``awaitTermination(timeout:)``: it is resumed by the thread's exit, as
    /// that call is woken. Called after the thread has exited (or on one that never started), it
    /// returns `true` at once. It waits for the thread to be disposed first, so a thread that is
    /// never disposed keeps it waiting; to bound the wait, cancel the
    /// awaiting task.
    ///
    /// Cancelling the awaiting task ends the wait at once; the thread is not affected.
    ///
    /// Never await it from a task running on this thread: from an actor whose executor it is, or
    /// from a task that prefers it as its executor. That task would resume on this thread once it
    /// has exited, which can never be; the call stops with a precondition failure naming the
    /// thread instead. Await it from elsewhere (a task of the global executor, another actor).
    ///
    /// - Returns: `true` once the thread is gone; `false` if the awaiting task was cancelled first.
    @discardableResult
    nonisolated(nonsending) public func awaitTermination() async -> Bool {
        // Runs on the caller's executor: on this thread, the caller would resume onto it once dead.
        precondition(!isCurrent, "DedicatedThread '\(name)'.awaitTermination(): awaited from a task on that thread, which can never resume there once it has exited")
        return await core.awaitTermination()
    }

    /// How many closures and jobs wait in the queue (not the one running).
    public var pendingCount: Int {
        core.pendingCount
    }
}

/// Why a ``DedicatedThread`` refused work.
public enum DedicatedThreadError: Error, Equatable, CustomStringConvertible {
    /// The thread was disposed; it accepts no more work.
    case disposed(name: String)
    /// The system refused to start the thread when it was created: `errno` is `pthread_create`'s error.
    case threadStartFailed(name: String, errno: Int32)

    /// A sentence that names the thread and why it refused, e.g. "DedicatedThread 'SQLite' is
    /// disposed and accepts no more work".
    public var description: String {
        switch self {
        case .disposed(let name): disposedDescription(of: "DedicatedThread", named: name)
        case .threadStartFailed(let name, let errno):
            "DedicatedThread '\(name)' has no thread: the system would not start it (errno \(errno))"
        }
    }
}
