/// What a ``ThrottledQueue`` shows in ``Diagnostics``: its entry (configuration, counts, the next
/// start and why it waits, its worker), the waits for it, and work submitted with a `label:`.
extension ThrottledQueue: DiagnosticsReporting, DiagnosticsWaitTarget {
    /// Queues `work`, as ``async(_:)`` does (or ``async(interval:_:)`` with an `interval`); while
    /// it runs, its thread's entry in ``Diagnostics/snapshot(longWaitsOver:)`` shows `label` as its work.
    ///
    /// - Parameters:
    ///   - label: What the dump shows the worker running while `work` runs.
    ///   - interval: The gap after this task; not negative. `nil`: the queue's interval.
    ///   - work: The task; it runs on the queue's worker when its turn comes.
    /// - Throws: ``ThreadPoolError`` if the queue's pool refused its worker; the work is then not queued.
    public func async(label: String, interval: Duration? = nil, _ work: @escaping @Sendable () -> Void) throws {
        if let interval {
            precondition(interval >= .zero, "ThrottledQueue '\(self.label)'.async(label:interval:_:): interval must not be negative, got \(interval)")
        }
        let labelled: @Sendable () -> Void = { ThreadActivity.labelled(label, work) }
        try mutex.withLock { () throws(ThreadPoolError) in try enqueueForWorker(.work(labelled), gap: interval, nested: false) }
    }

    /// Runs `work` on the calling thread when its turn comes, as ``sync(_:)`` does (or
    /// ``sync(interval:_:)`` with an `interval`); while it runs, the thread's entry in
    /// ``Diagnostics/snapshot(longWaitsOver:)`` shows `label` as its work.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw.
    @available(*, noasync, message: "it blocks the thread; use 'try await run { }' in async code")
    public func sync<T>(label: String, interval: Duration? = nil, _ work: () throws -> T) rethrows -> T {
        if let interval {
            precondition(interval >= .zero, "ThrottledQueue '\(self.label)'.sync(label:interval:_:): interval must not be negative, got \(interval)")
        }
        return try runHere(gap: interval) { try ThreadActivity.labelled(label, work) }
    }

    /// `ThrottledQueue "GitHub"`: what a wait for the queue (its turn, its idleness) waits for.
    package var waitDescription: String {
        "ThrottledQueue \"\(label)\""
    }

    /// The thread running the queue's task now (its worker, or a `sync` caller); `nil` between
    /// tasks, and while a `run` caller's task runs (a Swift task, on no one thread).
    package var holdingThread: ThreadActivity? {
        mutex.withLock { schedule.running == 0 ? nil : workerRunsTask ? workerActivity : syncRunner }
    }

    /// The queue's entry: its configuration, counts, the next start and why it waits, its worker.
    package func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
        let state = mutex.withLock {
            let local = schedule.explainNextStart(now: clock.now)
            var next = local
            if let local, let coordinated = coordination?.starts.explainStart(localAllowed: local.at, now: clock.now, monitor: monitor) {
                next = coordinated
            }
            return (interval: schedule.interval, pending: schedule.pendingCount, started: schedule.startedCount,
                    ended: schedule.endedCount, pausedUntil: schedule.pausedUntil, next: next, worker: workerActivity)
        }
        let pauseLeft = state.pausedUntil.map { max(0, clock.seconds(until: $0)) } ?? 0
        var threads: [Snapshot.Thread] = []
        if let worker = state.worker {
            var thread = clock.thread(worker)
            // Asleep toward a start: what holds the start is what it waits out.
            if thread.state == .sleeping, let next = state.next { thread.work = next.hindrance.rawValue }
            threads.append(thread)
        }
        return Snapshot.Component(
            kind: "ThrottledQueue", name: label,
            configuration: configuration(interval: state.interval),
            metrics: [
                Snapshot.Metric("tasks_pending", .gauge, Double(state.pending), help: "Accepted tasks that have not started."),
                Snapshot.Metric("tasks_started_total", .counter, Double(state.started), help: "Tasks started, nested ones included."),
                Snapshot.Metric("tasks_completed_total", .counter, Double(state.ended), help: "Tasks that have run to their end."),
                Snapshot.Metric("paused", .gauge, pauseLeft > 0 ? 1 : 0, help: "1 while a pause holds every start, else 0."),
                Snapshot.Metric("pause_remaining_seconds", .gauge, pauseLeft, help: "How long the pause in force still holds every start."),
                Snapshot.Metric("interval_seconds", .gauge, DiagnosticsClock.seconds(state.interval), help: "The gap that follows a task submitted without its own."),
            ],
            threads: threads,
            pending: state.next.map { [Snapshot.Pending(what: "the next task", dueIn: clock.seconds(until: $0.at), reason: $0.hindrance.rawValue)] } ?? [],
            pendingCount: state.pending)
    }

    private func configuration(interval: Duration) -> [Snapshot.Field] {
        let mutable = switch mutability {
        case .all: "all"
        case .defaultOnly: "defaultOnly"
        case .none: "none"
        }
        var fields = [
            Snapshot.Field("interval", DiagnosticsClock.text(interval)),
            Snapshot.Field("monitor", monitor == .concurrent ? "concurrent" : "serial"),
            Snapshot.Field("mutability", mutable),
        ]
        if let limit { fields.append(Snapshot.Field("limit", "\(limit.count) per \(DiagnosticsClock.text(limit.window))")) }
        fields.append(Snapshot.Field("coordination", coordination.map { $0.coordinator.diagnosticsDescription } ?? "local"))
        return fields
    }

}
