/// What a ``DedicatedThread`` shows in ``Diagnostics``: its entry (queue, counts, its one thread),
/// the waits for it, and work submitted with a `label:`.
extension DedicatedThread: DiagnosticsReporting {
    /// Runs `work` on the thread, after everything submitted before it, as ``execute(_:)`` does;
    /// while it runs, the thread's entry in ``Diagnostics/snapshot(longWaitsOver:)`` shows `label`
    /// as its work.
    ///
    /// - Throws: ``DedicatedThreadError/disposed(name:)`` after ``dispose()`` or ``disposeNow()``.
    public func execute(label: String, _ work: @escaping @Sendable () -> Void) throws {
        try core.execute { ThreadActivity.labelled(label, work) }
    }

    /// Runs `work` on the thread and returns its result, as ``sync(_:)`` does; while it runs, the
    /// thread's entry in ``Diagnostics/snapshot(longWaitsOver:)`` shows `label` as its work.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw.
    @available(*, noasync, message: "it blocks the thread; use 'try await run(label:_:)' in async code")
    public func sync<T>(label: String, _ work: () throws -> T) rethrows -> T {
        try core.sync { try ThreadActivity.labelled(label, work) }
    }

    /// Runs `work` on the thread and suspends until it has run, as ``run(_:)`` does; while it
    /// runs, the thread's entry in ``Diagnostics/snapshot(longWaitsOver:)`` shows `label` as its work.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, `CancellationError`, or ``DedicatedThreadError/disposed(name:)``.
    public func run<T: Sendable>(label: String, _ work: sending @escaping () throws -> T) async throws -> T {
        try await core.run(SendingWork { try ThreadActivity.labelled(label, work) })
    }

    /// The thread's entry: whether it is paused or disposed, its counts, its one thread.
    package func report(_ clock: DiagnosticsClock) -> Snapshot.Component {
        let state = core.diagnosticsState()
        return Snapshot.Component(
            kind: "DedicatedThread", name: name,
            configuration: [Snapshot.Field("state", state.lifecycle)],
            metrics: [
                Snapshot.Metric("tasks_completed_total", .counter, Double(state.completed),
                                help: "Closures, Swift jobs and sync calls the thread has run to their end."),
                Snapshot.Metric("tasks_queued", .gauge, Double(state.queued),
                                help: "Closures, Swift jobs and sync calls waiting for the thread."),
                Snapshot.Metric("paused", .gauge, state.lifecycle == "paused" ? 1 : 0,
                                help: "1 while the thread is paused, else 0."),
            ],
            threads: state.activity.map { [clock.thread($0)] } ?? [],
            pendingCount: state.queued)
    }
}

/// What a wait for a dedicated thread (a `sync`, its termination) waits on: its one thread.
extension DedicatedThreadCore: DiagnosticsWaitTarget {
    /// `DedicatedThread "db"`.
    var waitDescription: String {
        "DedicatedThread \"\(name)\""
    }
}
