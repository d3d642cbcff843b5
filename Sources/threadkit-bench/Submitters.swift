// The ways the pool, floor and dedicated workloads hand a closure to other threads, each as its
// documentation recommends, and how a workload ends the ThreadKit objects it made.
import Dispatch
import Foundation
import ThreadKit

/// A way to hand a closure to a pool of threads (or one thread).
///
/// The measuring functions are generic over it, so every contender's submit call is specialized
/// and inlined as in a program that calls the API directly.
protocol PoolSubmitter: Sendable {
    func submit(_ work: @escaping @Sendable () -> Void) throws
}

/// `ThreadPool.execute`: the fast path, no handle.
struct ThreadKitExecute: PoolSubmitter {
    let pool: ThreadPool
    func submit(_ work: @escaping @Sendable () -> Void) throws { try pool.execute(work) }
}

/// `ThreadPool.schedule`: returns a `ScheduledTask` handle (dropped here, as by a caller that only
/// might have cancelled).
struct ThreadKitSchedule: PoolSubmitter {
    let pool: ThreadPool
    func submit(_ work: @escaping @Sendable () -> Void) throws { _ = try pool.schedule(work) }
}

/// `DispatchQueue.global().async(execute:)`.
struct GCDAsync: PoolSubmitter {
    let queue = DispatchQueue.global()
    func submit(_ work: @escaping @Sendable () -> Void) { queue.async(execute: work) }
}

/// A `DispatchWorkItem` (GCD's cancellable handle) submitted with `async(execute:)`.
struct GCDWorkItem: PoolSubmitter {
    let queue = DispatchQueue.global()
    func submit(_ work: @escaping @Sendable () -> Void) {
        let item = DispatchWorkItem(block: work)
        queue.async(execute: item)
    }
}

/// `OperationQueue.addOperation(_:)` on a queue with `maxConcurrentOperationCount = 2`.
struct OperationQueueAdd: PoolSubmitter {
    let queue: OperationQueue

    init(width: Int) {
        queue = OperationQueue()
        queue.maxConcurrentOperationCount = width
    }

    func submit(_ work: @escaping @Sendable () -> Void) { queue.addOperation(work) }
}

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

extension ThreadPool {
    /// Disposes the pool and waits (up to 10 s) for its threads: a workload's `finish`.
    func shutDown() {
        dispose()
        _ = awaitTermination(timeout: .seconds(10))
    }
}

extension DedicatedThread {
    /// Disposes the thread and waits (up to 10 s) for it to end: a workload's `finish`.
    func shutDown() {
        dispose()
        _ = awaitTermination(timeout: .seconds(10))
    }
}
