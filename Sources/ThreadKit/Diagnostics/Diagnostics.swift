import Foundation

/// What ThreadKit is running, and who waits for whom: a live inventory of every component and
/// thread, the wait-for graph, a `jstack`-style dump, and Prometheus metrics.
///
/// ```swift
/// print(Diagnostics.snapshot())                       // the dump, for people
/// let json = Diagnostics.snapshot().json()            // the same, for programs
/// let metrics = Diagnostics.prometheusText()          // serve it at /metrics
/// Diagnostics.dumpOnSignal(SIGUSR1)                   // `kill -USR1 <pid>` prints the dump
/// ```
///
/// Every ``ThreadPool``, ``TimerThread``, ``ThrottledQueue``, ``DedicatedThread``, `URLDispatcher`
/// and `RedisClient` registers itself (weakly) when it is created and leaves when it is released.
/// Reading one takes its lock briefly and never calls user code; a thread records its state only
/// when it spins, sleeps, wakes or blocks, never for a task that finds the next one waiting.
public enum Diagnostics {
    /// Every live component and thread, and the wait-for graph, now.
    ///
    /// - Parameter threshold: How long a wait lasts before the dump lists it among the long waits
    ///   (a cycle is listed whatever its age).
    public static func snapshot(longWaitsOver threshold: Duration = .seconds(1)) -> Snapshot {
        let takenAt = Date()
        // Each thread's state is read once, before the components report: a thread's row and its
        // edge in the wait-for graph tell the same moment.
        let threads = ThreadActivity.allAlive()
        let states = threads.map { $0.read() }
        let clock = DiagnosticsClock(
            now: .now(), states: Dictionary(uniqueKeysWithValues: zip(threads.map(ObjectIdentifier.init), states)))
        let components = DiagnosticsRegistry.reports(clock)
        let componentThreads = Set(components.flatMap { $0.threads.map(\.kernelThreadID) })
        var waits: [Snapshot.Wait] = []
        var edges: [Int32: Edge] = [:]
        var otherThreads: [Snapshot.Thread] = []
        for (activity, state) in zip(threads, states) {
            if let wait = state.wait {
                let holder = wait.target.holdingThread
                waits.append(Snapshot.Wait(
                    thread: reference(activity), kind: wait.kind, waitsFor: wait.target.description,
                    holder: holder.map(reference), seconds: max(0, clock.seconds(since: state.since))))
                edges[activity.kernelThreadID] = Edge(waiter: activity, since: state.since, holder: holder?.kernelThreadID)
            }
            // A thread of no component shows when it blocks in one of ThreadKit's waits, or runs
            // work given with a `label:` (a `sync(label:)` caller).
            if !componentThreads.contains(activity.kernelThreadID), state.wait != nil || state.work != nil {
                otherThreads.append(clock.thread(activity))
            }
        }
        waits.sort { $0.thread.kernelThreadID < $1.thread.kernelThreadID }
        otherThreads.sort { $0.kernelThreadID < $1.kernelThreadID }
        let cycles = cycles(of: waits) { edges[$0.thread.kernelThreadID]?.isStill() == true }
        return Snapshot(
            takenAt: takenAt, processID: getpid(), longWaitThreshold: DiagnosticsClock.seconds(threshold),
            components: components, otherThreads: otherThreads, waits: waits, cycles: cycles)
    }

    /// Every live component's counters, gauges and histograms, and the process-wide thread and
    /// wait gauges, in the Prometheus text exposition format (version 0.0.4): serve it at
    /// `/metrics` with the content type `text/plain; version=0.0.4; charset=utf-8`.
    ///
    /// Names follow the format's conventions: `threadkit_<part>_<what>_<unit>`, `_total` for
    /// counters, one `# HELP` and `# TYPE` line per family, and the component's name in a label:
    /// `threadkit_pool_tasks_completed_total{pool="io"} 1042`.
    public static func prometheusText() -> String {
        PrometheusText.render(snapshot())
    }

    /// Every thread with an activity, one aligned row each: what the deadlock detector writes
    /// before it stops the process. Takes only the threads' own locks, never a component's.
    static func threadsText() -> String {
        let clock = DiagnosticsClock(now: .now())
        let threads = ThreadActivity.allAlive().map(clock.thread).sorted { $0.kernelThreadID < $1.kernelThreadID }
        return Snapshot.threadLines(threads).joined(separator: "\n") + "\n"
    }

    /// The cycles among `waits`, each starting with its thread of lowest kernel id: those whose
    /// every wait, looked at again, `isStill` in force (a deadlock does not move; see ``Edge``).
    static func cycles(of waits: [Snapshot.Wait], isStill: (Snapshot.Wait) -> Bool = { _ in true }) -> [[Snapshot.Wait]] {
        var edges: [Int32: Int32] = [:]
        var byThread: [Int32: Snapshot.Wait] = [:]
        for wait in waits {
            byThread[wait.thread.kernelThreadID] = wait
            if let holder = wait.holder { edges[wait.thread.kernelThreadID] = holder.kernelThreadID }
        }
        return WaitCycles.find(edges).map { cycle in cycle.map { byThread[$0]! } }.filter { $0.allSatisfy(isStill) }
    }

    /// One edge of the wait-for graph as first read: who waits, since when, for whom.
    ///
    /// The edges are read one after another while the threads run on, so a cycle among them may
    /// join waits that never existed at the same moment. A deadlock does not move: a cycle is
    /// reported only if each of its threads is, read again, still in the same wait (begun at the
    /// same instant) for the same holder.
    private struct Edge {
        let waiter: ThreadActivity
        let since: MonotonicInstant
        let holder: Int32?

        func isStill() -> Bool {
            let now = waiter.read()
            guard let wait = now.wait, now.since == since else { return false }
            return wait.target.holdingThread?.kernelThreadID == holder
        }
    }

    private static func reference(_ activity: ThreadActivity) -> Snapshot.ThreadReference {
        Snapshot.ThreadReference(name: activity.name, kernelThreadID: activity.kernelThreadID)
    }

}
