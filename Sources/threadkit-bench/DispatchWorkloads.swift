// dedicated.throughput, dedicated.sync and dispatch.sync.held: DedicatedThread and DispatchMethod
// against a serial DispatchQueue.
import Dispatch
import Foundation
import ThreadKit

/// `DedicatedThread.execute`: one thread, FIFO.
struct DedicatedExecute: PoolSubmitter {
    let thread: DedicatedThread
    func submit(_ work: @escaping @Sendable () -> Void) throws { try thread.execute(work) }
}

/// `DispatchQueue.async(execute:)` on a serial queue.
struct SerialQueueAsync: PoolSubmitter {
    let queue: DispatchQueue
    func submit(_ work: @escaping @Sendable () -> Void) { queue.async(execute: work) }
}

/// `dedicated.*` and `dispatch.sync.held`: DedicatedThread and DispatchMethod against a serial queue.
enum DispatchWorkloads {
    static let perCall = [Metric(name: "per call", unit: "ns")]

    /// `dedicated.throughput`: a million empty closures from one producer to one thread.
    static func dedicatedThroughput(scale: Scale) -> Workload {
        let items = scale.size(1_000_000)
        let thread = DedicatedThread(name: "bench.dedicated")
        let queue = DispatchQueue(label: "bench.serial")
        return Workload(
            id: "dedicated.throughput", metrics: PoolWorkloads.throughputMetrics,
            contenders: [
                PoolWorkloads.throughputContender("ThreadKit", DedicatedExecute(thread: thread), items: items, producers: 1, capture: .shared),
                PoolWorkloads.throughputContender("GCD serial", SerialQueueAsync(queue: queue), items: items, producers: 1, capture: .shared),
            ],
            finish: { shutDown(thread) })
    }

    /// `dedicated.sync`: round-trip `sync` calls from another thread, one after another.
    static func dedicatedSync(scale: Scale) -> Workload {
        let calls = scale.size(200_000)
        let thread = DedicatedThread(name: "bench.sync")
        let queue = DispatchQueue(label: "bench.sync.serial")
        return Workload(
            id: "dedicated.sync", metrics: perCall,
            contenders: [
                Contender(name: "ThreadKit", warmUp: { _ = timePerCall(calls / 10) { thread.sync { blackHole() } } }) {
                    timePerCall(calls) { thread.sync { blackHole() } }
                },
                Contender(name: "GCD serial", warmUp: { _ = timePerCall(calls / 10) { queue.sync { blackHole() } } }) {
                    timePerCall(calls) { queue.sync { blackHole() } }
                },
            ],
            finish: { shutDown(thread) })
    }

    /// `dispatch.sync.held`: `DispatchMethod.sync` onto a serial queue from a thread that already
    /// holds two contexts (it runs work for a dedicated thread and a one-thread pool), against
    /// `DispatchQueue.sync` from the same thread: what re-entry detection costs a held thread.
    static func syncWhileHolding(scale: Scale) -> Workload {
        let calls = scale.size(200_000)
        let outer = DedicatedThread(name: "bench.held")
        let pool = ThreadPool(name: "bench.held", size: 1)
        let queue = DispatchQueue(label: "bench.held.serial")
        let method = DispatchMethod.sync(on: .serialQueue(queue))
        /// Runs `body` on the dedicated thread, inside a sync onto the one-thread pool.
        func holdingTwo(_ body: @escaping @Sendable () -> Measurement) -> Measurement {
            outer.sync { (try? DispatchMethod.sync(on: .pool(pool)).execute(body).wait()) ?? Measurement() }
        }
        return Workload(
            id: "dispatch.sync.held", metrics: perCall,
            contenders: [
                Contender(name: "ThreadKit", warmUp: { _ = holdingTwo { timePerCall(calls / 10) { method.execute { blackHole() } } } }) {
                    holdingTwo { timePerCall(calls) { method.execute { blackHole() } } }
                },
                Contender(name: "GCD serial", warmUp: { _ = holdingTwo { timePerCall(calls / 10) { queue.sync { blackHole() } } } }) {
                    holdingTwo { timePerCall(calls) { queue.sync { blackHole() } } }
                },
            ],
            finish: {
                shutDown(outer)
                pool.dispose()
            })
    }

    /// Calls `body` `calls` times; the wall time per call.
    private static func timePerCall(_ calls: Int, _ body: () -> Void) -> Measurement {
        let start = ContinuousClock.now
        for _ in 0..<calls { body() }
        let elapsed = ContinuousClock.now - start
        return Measurement(values: ["per call": elapsed.nanoseconds / Double(calls)])
    }

    private static func shutDown(_ thread: DedicatedThread) {
        thread.dispose()
        _ = thread.awaitTermination(timeout: .seconds(10))
    }
}

/// An empty body the optimizer cannot remove.
@inline(never)
func blackHole() {}
