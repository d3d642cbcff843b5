import Dispatch
import Foundation

/// Where a ``DispatchMethod`` runs work: a Dispatch queue, or one of ThreadKit's executors.
///
/// Serial targets (`.main`, `.serialQueue`, `.thread`, `.throttled`, and a `.pool` of size 1) run
/// one piece of work at a time; a `sync` onto a serial target from work it is already running runs
/// inline instead of waiting for itself.
public enum DispatchTarget: Sendable {
    /// `DispatchQueue.main`: work runs only if the program drains the main queue (`dispatchMain()`
    /// or a run loop).
    case main
    /// A global concurrent queue of this quality of service.
    case global(qos: DispatchQoS.QoSClass = .default)
    /// A serial `DispatchQueue`; the caller promises it is serial.
    case serialQueue(DispatchQueue)
    /// A concurrent `DispatchQueue`.
    case concurrentQueue(DispatchQueue)
    /// A ``ThreadPool``: work runs on one of its threads.
    case pool(ThreadPool)
    /// A ``DedicatedThread``: work runs on that one thread, in FIFO order.
    case thread(DedicatedThread)
    /// A ``ThrottledQueue``: work runs in the queue's order, with its gaps and rate limit.
    case throttled(ThrottledQueue)
}

extension DispatchTarget: CustomStringConvertible {
    /// The target as ThreadKit's messages name it: `DedicatedThread 'db'`, `serial DispatchQueue
    /// 'q'`, `the main queue`, `the global queue (default)`. A serial target is named from its
    /// serial context's naming (a pool of any size as a one-thread pool is), with its label in
    /// single quotes.
    public var description: String {
        switch self {
        case .global(let qos): "the global queue (\(qos))"
        case .concurrentQueue(let queue): "concurrent DispatchQueue '\(queue.label)'"
        case .serialQueue: "serial " + Self.name(of: serialContext!)
        case .pool(let pool): Self.name(of: SerialContext(.pool(pool)))
        case .main, .thread, .throttled: Self.name(of: serialContext!)
        }
    }

    /// `DedicatedThread 'db'`: the context's kind and its label in single quotes, or `the main queue`.
    private static func name(of context: SerialContext) -> String {
        context.named.map { "\($0.kind) '\($0.label)'" } ?? "the main queue"
    }
}

extension DispatchTarget {
    /// The serial context the target is, if it runs one piece of work at a time.
    var serialContext: SerialContext? {
        switch self {
        case .main: SerialContext(.main)
        case .serialQueue(let queue): SerialContext(.queue(queue))
        case .thread(let thread): SerialContext(.thread(thread.core))
        case .throttled(let queue): SerialContext(.throttled(queue))
        case .pool(let pool): pool.size == 1 ? SerialContext(.pool(pool)) : nil
        case .global, .concurrentQueue: nil
        }
    }

    /// Queues `work` to run on the target; on a serial target, it runs holding the target's context.
    ///
    /// - Throws: The target's refusal (a disposed pool, thread or throttled queue).
    func submit(_ work: @escaping @Sendable () -> Void) throws {
        switch self {
        case .main, .serialQueue:
            let context = serialContext!
            let queue = if case .serialQueue(let queue) = self { queue } else { DispatchQueue.main }
            queue.async { ExecutionContexts.withHeld(context, work) }
        case .global(let qos): DispatchQueue.global(qos: qos).async(execute: work)
        case .concurrentQueue(let queue): queue.async(execute: work)
        case .pool(let pool): try pool.execute(work)
        case .thread(let thread): try thread.execute(work)
        case .throttled(let queue): try queue.async(work)
        }
    }

    /// Queues `work` like ``submit(_:)``, but never blocks the calling thread and never runs `work`
    /// on it: what a timer call (a ``DispatchMethod/after(_:on:)`` step) must do, so that no other
    /// call on `TimerThread.shared` waits behind it.
    ///
    /// Only a pool can make a submitter wait (a full queue under ``ThreadPool/OverflowPolicy/block``)
    /// or run the work itself (``ThreadPool/OverflowPolicy/runOnCaller``). Here the work waits for
    /// room in the pool's queue instead, as an async ``ThreadPool/run(_:)`` does, and a pool thread
    /// runs it; ``ThreadPool/OverflowPolicy/reject`` still refuses it.
    ///
    /// - Throws: The target's refusal (a disposed pool, thread or throttled queue, a full pool that
    ///   rejects).
    func submitWithoutWaiting(_ work: @escaping @Sendable () -> Void) throws {
        guard case .pool(let pool) = self else { return try submit(work) }
        try pool.submit(.task(ScheduledTask(pool: pool, work: work)), waiting: .suspend)
    }

    /// Runs `work` on the target and blocks until it has run, following the re-entry rules of
    /// ``ExecutionContexts``: if the calling thread holds the target's context (or is a thread the
    /// target owns), the work runs without waiting for the target's queue, inline, or, for a
    /// thread-affine context reached through others, on the thread that runs that context's work;
    /// a stop with a message if waiting would close a cycle of blocked threads; else a wait. The
    /// work holds what the caller held, so a nested `sync` back onto any of those contexts is
    /// re-entry too.
    ///
    /// A caller that runs a thread-affine context's work (a dedicated thread, work inside a serial
    /// queue or the main queue) waits serving nested requests: the work may need a piece of that
    /// context's work run on its thread, by the caller. It hands the work over asynchronously
    /// then, since `DispatchQueue.sync` would block it where it cannot serve.
    ///
    /// Not generic, so that a caller in another module runs it without looking up type metadata;
    /// `work` keeps its own result.
    ///
    /// - Throws: The target's refusal (a disposed pool, thread or throttled queue); `work` did not run.
    @usableFromInline
    func runAndWait(_ work: () -> Void) throws {
        switch self {
        case .thread(let thread):
            return try thread.syncOrThrow(work)
        case .throttled(let queue):
            return queue.sync(work)
        case .pool(let pool) where pool.isCurrentThreadMember:
            return work()
        default:
            break
        }
        let context = serialContext
        if let context, ExecutionContexts.reenter(context, work) { return }
        try ExecutionContexts.includingMainQueue {
            try ExecutionContexts.includingTaskHolds {
                let serving = ExecutionContexts.servesNestedRequests
                let handover = ExecutionContexts.handover(in: context, serving: serving)
                try withoutActuallyEscaping(work) { work in
                    let holding = { handover.run(work) }
                    let wait = { serving ? try runAndWaitServing(holding) : try runAndWaitElsewhere(holding) }
                    guard let context else { return try wait() }
                    return try ExecutionContexts.blocking(for: context, wait)
                }
            }
        }
    }

    /// Runs `work` on the target from a thread that is not the target's, and waits for it.
    private func runAndWaitElsewhere(_ work: () -> Void) throws {
        switch self {
        case .main: DispatchQueue.main.sync(execute: work)
        case .global(let qos): DispatchQueue.global(qos: qos).sync(execute: work)
        case .serialQueue(let queue), .concurrentQueue(let queue): queue.sync(execute: work)
        case .pool(let pool): try pool.runAndWait(work)
        case .thread(let thread): try thread.syncOrThrow(work)
        case .throttled(let queue): queue.sync(work)
        }
    }

    /// Like ``runAndWaitElsewhere(_:)``, but the caller sleeps on its own parker, serving nested
    /// requests, while the target runs `work` (submitted asynchronously). A pool that drops the
    /// work unrun (``ThreadPool/disposeNow()``) gives it back: the wait ends with its refusal.
    private func runAndWaitServing(_ work: () -> Void) throws {
        let ran = try ExecutionContexts.LentWork._blockingLend(work) { lent in
            let run: @Sendable () -> Void = { lent.run() }
            switch self {
            case .main: DispatchQueue.main.async(execute: run)
            case .global(let qos): DispatchQueue.global(qos: qos).async(execute: run)
            case .serialQueue(let queue), .concurrentQueue(let queue): queue.async(execute: run)
            case .pool(let pool): try pool.execute(run)
            case .thread, .throttled: preconditionFailure("\(self) hands its work over itself")
            }
        }
        if !ran, case .pool(let pool) = self {
            throw ThreadPoolError.disposed(pool: pool.name)
        }
    }
}
