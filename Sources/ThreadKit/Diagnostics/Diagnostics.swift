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
        let clock = DiagnosticsClock(now: .now())
        let takenAt = Date()
        let components = DiagnosticsRegistry.reports(clock)
        let threads = ThreadActivity.allAlive()
        var waits: [Snapshot.Wait] = []
        var blockedOutside: [Snapshot.Thread] = []
        let componentThreads = Set(components.flatMap { $0.threads.map(\.kernelThreadID) })
        for activity in threads {
            let state = activity.read()
            guard let wait = state.wait else { continue }
            let holder = wait.target.holdingThread
            waits.append(Snapshot.Wait(
                thread: reference(activity), kind: wait.kind, waitsFor: wait.target.description,
                holder: holder.map(reference), seconds: max(0, clock.seconds(since: state.since))))
            if !componentThreads.contains(activity.kernelThreadID) {
                blockedOutside.append(clock.thread(activity))
            }
        }
        waits.sort { $0.thread.kernelThreadID < $1.thread.kernelThreadID }
        blockedOutside.sort { $0.kernelThreadID < $1.kernelThreadID }
        return Snapshot(
            takenAt: takenAt, processID: getpid(), longWaitThreshold: DiagnosticsClock.seconds(threshold),
            components: components, otherThreads: blockedOutside, waits: waits, cycles: cycles(of: waits))
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

    /// The cycles among `waits`, each starting with its thread of lowest kernel id.
    static func cycles(of waits: [Snapshot.Wait]) -> [[Snapshot.Wait]] {
        var edges: [Int32: Int32] = [:]
        var byThread: [Int32: Snapshot.Wait] = [:]
        for wait in waits {
            byThread[wait.thread.kernelThreadID] = wait
            if let holder = wait.holder { edges[wait.thread.kernelThreadID] = holder.kernelThreadID }
        }
        return WaitCycles.find(edges).map { cycle in cycle.map { byThread[$0]! } }
    }

    private static func reference(_ activity: ThreadActivity) -> Snapshot.ThreadReference {
        Snapshot.ThreadReference(name: activity.name, kernelThreadID: activity.kernelThreadID)
    }

}
