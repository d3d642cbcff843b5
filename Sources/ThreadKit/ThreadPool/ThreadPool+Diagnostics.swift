import Synchronization

extension ThreadPool: DiagnosticsReporting, DiagnosticsWaitTarget {
    /// What one hold of the mutex copies out of the pool for its entry in a snapshot.
    private struct Reading {
        var threads = 0, idle = 0, queued = 0, completed = 0, peak = 0
        var started = 0, left = 0, blockedSubmitters = 0
        var workers: [(number: Int, activity: ThreadActivity)] = []
    }

    /// The pool's entry: its configuration, its counts as metrics, and its threads, oldest first.
    ///
    /// One brief hold of the mutex copies the counts and the workers' activities; each thread is
    /// read after it is let go.
    package func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
        let reading = mutex.withLock {
            let idle = idleWorkers.current
            return Reading(
                threads: machine.threads, idle: min(machine.threads, idle.sleepers + idle.spinners),
                queued: readIntake().queued,
                completed: machine.workers.all.reduce(completedCount.load(ordering: .relaxed)) {
                    $0 + $1.completed.load(ordering: .relaxed)
                },
                peak: machine.peakThreads, started: machine.threadsStarted, left: machine.threadsLeft,
                blockedSubmitters: machine.blockedSubmitters,
                workers: machine.workers.all.map { ($0.number, $0.activity) })
        }
        let configuration: [Snapshot.Field] = [
            Snapshot.Field("size", String(size)),
            Snapshot.Field("keepAlive", DiagnosticsClock.text(keepAlive)),
            Snapshot.Field("collectionInterval", DiagnosticsClock.text(collectionInterval)),
            Snapshot.Field("queueLimit", queueLimit.map(String.init) ?? "none"),
            Snapshot.Field("whenFull", Self.text(overflowPolicy)),
        ]
        let counts: [(name: String, kind: Snapshot.Metric.Kind, value: Int, help: String)] = [
            ("threads", .gauge, reading.threads, "Threads alive, busy or idle."),
            ("threads_busy", .gauge, reading.threads - reading.idle, "Threads running a task."),
            ("threads_idle", .gauge, reading.idle, "Threads waiting for work."),
            ("threads_peak", .gauge, reading.peak, "The most threads alive at once."),
            ("threads_started_total", .counter, reading.started,
             "Threads the pool started (or tried to: a start the system refused counts)."),
            ("threads_exited_total", .counter, reading.left, "Threads that left the pool, collected when idle or at shutdown."),
            ("tasks_queued", .gauge, reading.queued, "Tasks waiting for a thread."),
            ("tasks_completed_total", .counter, reading.completed, "Tasks that ran to their end."),
            ("submitters_blocked", .gauge, reading.blockedSubmitters,
             "Threads blocked in a submission, waiting for room in the full queue."),
        ]
        let metrics = counts.map { Snapshot.Metric($0.name, $0.kind, Double($0.value), help: $0.help) }
        return Snapshot.Component(
            kind: "ThreadPool", name: name, configuration: configuration, metrics: metrics,
            threads: reading.workers.sorted { $0.number < $1.number }.map { clock.thread($0.activity) },
            pendingCount: reading.queued)
    }

    /// `ThreadPool "Images"`, as a wait for the pool (a full queue, its termination) names it.
    package var waitDescription: String { "ThreadPool \"\(name)\"" }

    /// A one-thread pool's thread while it runs a task: it holds the pool as a serial context.
    /// `nil` while that thread idles, and for a larger pool, which no one thread holds.
    package var holdingThread: ThreadActivity? {
        guard size == 1 else { return nil }
        return mutex.withLock {
            let idle = idleWorkers.current
            guard idle.sleepers + idle.spinners == 0 else { return nil }
            return machine.workers.all.first { _ in true }?.activity
        }
    }

    /// The thread running the task whose address is `task`, if one is.
    func thread(running task: UInt) -> ThreadActivity? {
        mutex.withLock { machine.workers.all.first { $0.runningTask.load(ordering: .relaxed) == task }?.activity }
    }

    private static func text(_ policy: OverflowPolicy) -> String {
        switch policy {
        case .block: "block"
        case .reject: "reject"
        case .runOnCaller: "runOnCaller"
        }
    }
}

/// What a thread blocked in ``ScheduledTask/wait()`` waits for: `a task of ThreadPool "io"`, and
/// the pool's thread that runs it (none while it is queued).
///
/// Made when a wait blocks, never per task: the task keeps only its pool's identity, and the
/// worker that runs a task with a handle publishes its address (see ``ThreadPool/Worker/runningTask``).
final class TaskWaitTarget: DiagnosticsWaitTarget {
    let waitDescription: String
    /// Held, so that its address names no other task while this wait is shown.
    private let task: ScheduledTask
    private weak let pool: ThreadPool?

    init(_ task: ScheduledTask, pool: ThreadPool?, label: String?) {
        self.task = task
        self.pool = pool
        var text = "a task of ThreadPool \"\(pool?.name ?? "?")\""
        if let label { text += " \"\(label)\"" }
        waitDescription = text
    }

    /// The pool's thread running the task: one brief hold of the pool's mutex.
    var holdingThread: ThreadActivity? {
        pool?.thread(running: UInt(bitPattern: ObjectIdentifier(task)))
    }
}

extension ThreadPool {
    /// ``execute(_:)`` for work labelled `label`: while it runs, the thread's entry in
    /// ``Diagnostics/snapshot(longWaitsOver:)`` shows the label instead of `task`, so a dump
    /// tells what each thread is busy with.
    ///
    /// - Throws: As ``execute(_:)``.
    public func execute(label: String, _ work: @escaping @Sendable () -> Void) throws {
        try execute { ThreadActivity.labelled(label) { work() } }
    }

    /// ``schedule(_:)`` for work labelled `label`: while it runs, the thread's entry in
    /// ``Diagnostics/snapshot(longWaitsOver:)`` shows the label instead of `task`, and a thread
    /// blocked in ``ScheduledTask/wait()`` on it is shown waiting for `a task of ThreadPool
    /// "<name>" "<label>"`.
    ///
    /// - Throws: As ``schedule(_:)``.
    @discardableResult
    public func schedule(label: String, _ work: @escaping @Sendable () -> Void) throws -> ScheduledTask {
        let task = ScheduledTask(pool: self, work: { ThreadActivity.labelled(label) { work() } }, label: label)
        try submit(.task(task))
        return task
    }

    /// ``run(_:)`` for work labelled `label`: while it runs, the thread's entry in
    /// ``Diagnostics/snapshot(longWaitsOver:)`` shows the label instead of `task`.
    ///
    /// - Throws: As ``run(_:)``.
    public func run<T: Sendable>(label: String, _ work: sending @escaping () throws -> T) async throws -> T {
        let work = SendingWork(work)
        return try await run { try ThreadActivity.labelled(label) { try work() } }
    }
}
