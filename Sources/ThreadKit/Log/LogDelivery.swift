import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Hands log records to their delegate one at a time, in the order they were logged, and never
/// while holding its lock.
///
/// **The queue.** A logging thread appends its record, together with the delegate in force at that
/// moment (its *target*), to one FIFO. At most ``Limits/maxBacklog`` records wait in it; a record
/// that finds it full is dropped and counted per source, and once a slot frees up, one notice per
/// source (`dropped N records: …`) joins the queue where the dropped records would have been.
///
/// **The deliverer.** One thread at a time holds the role of deliverer and calls the targets, with
/// the lock released. A logging thread that finds nobody delivering takes the role and delivers
/// its own record and at most ``Limits/callerBudget`` more. If records still wait after that, it
/// hands the role to the delivery thread (started on demand, named ``Limits/workerName``) and
/// returns; the delivery thread delivers until the queue is empty, then waits for the next hand-off
/// and exits after ``Limits/workerKeepAlive`` without one. A thread the package shares (a timer
/// thread) never takes the role: it hands it to the delivery thread at once, so a delegate never
/// runs there (unless the system refuses to start the delivery thread: then it delivers itself,
/// late beats lost). Whenever records wait, someone holds the
/// role, so no record is left behind when logging goes quiet. A target that logs from inside its
/// call only queues the record: the deliverer delivers it after the call returns.
///
/// **Changing the delegate.** ``setDelegate(_:)`` waits until every record queued for an earlier
/// delegate has been delivered to it (and its call has returned), so that once it returns no earlier
/// delegate is called again. Called by the deliverer itself (from inside a delegate, or from a
/// `deinit` the deliverer runs), it cannot wait for itself: it returns at once, and the records
/// already queued for the earlier delegate still go to it, after the current call. The replaced
/// delegate, and every delivered record and target, are released with no lock held, so a `deinit`
/// may log.
final class LogDelivery: @unchecked Sendable {
    // Sendable: `state` is only touched under `mutex`; `limits` never changes.

    /// The bounds of one delivery engine.
    struct Limits: Sendable {
        /// How many records may wait for delivery; more are dropped and counted.
        var maxBacklog: Int
        /// How many records a logging thread delivers beyond its own before it hands the rest on.
        var callerBudget: Int
        /// How long the delivery thread waits for more work before it exits.
        var workerKeepAlive: Duration
        /// The delivery thread's name (at most 15 bytes, the kernel's limit).
        var workerName: String

        /// The bounds of ``LogDelivery/shared``: 32,768 waiting records (a few megabytes), 100
        /// records per caller, a delivery thread "ThreadKit Log" that lingers one second.
        static let standard = Limits(
            maxBacklog: 32_768, callerBudget: 100, workerKeepAlive: .seconds(1), workerName: "ThreadKit Log")
    }

    /// The engine behind ``Log``.
    static let shared = LogDelivery(limits: .standard)

    let limits: Limits

    /// A queued record and the delegate it goes to (`nil`: the console).
    private struct Entry {
        var record: Log.Record
        var target: (any LogDelegate)?
        /// How many times the delegate had been set when it was queued.
        var generation: UInt64
    }

    /// Who delivers.
    private enum Role {
        /// Nobody: the queue is empty; the next logging thread takes the role.
        case free
        /// Given to the delivery thread, which has not picked it up yet.
        case handedToWorker
        /// This thread is delivering.
        case heldBy(pthread_t)
    }

    private struct State {
        var pending = RingBuffer<Entry>()
        var delegate: (any LogDelegate)?
        /// Incremented by every set of the delegate; entries carry the value of their time.
        var generation: UInt64 = 0
        var role = Role.free
        /// The generation of the entry being delivered right now, if any.
        var inFlight: UInt64?
        /// Setters waiting for earlier generations to be delivered.
        var waitingSetters = 0
        /// Whether the delivery thread exists (running, or waiting for a hand-off).
        var workerAlive = false
        /// Records dropped since the last notice, per source, in the order of their first drop.
        var drops: [(source: Log.Source, count: Int)] = []
    }

    private let mutex = PThreadMutex()
    /// Signalled when the role is handed to the delivery thread.
    private let handOff = MonotonicCondition()
    /// Broadcast when a delivery ends while a setter waits.
    private let deliveryEnded = MonotonicCondition()
    /// Guarded by `mutex`.
    private var state = State()

    init(limits: Limits) {
        precondition(limits.maxBacklog >= 1, "LogDelivery.init(limits:): maxBacklog must be at least 1, got \(limits.maxBacklog)")
        precondition(limits.callerBudget >= 0, "LogDelivery.init(limits:): callerBudget must not be negative, got \(limits.callerBudget)")
        self.limits = limits
    }

    // MARK: - The delegate

    /// The delegate records logged from now on go to; `nil` is the console.
    var delegate: (any LogDelegate)? {
        mutex.withLock { state.delegate }
    }

    /// Makes `newValue` the target of records logged from now on, and returns once every record
    /// logged before goes nowhere else: it has been delivered to the delegate it was logged under.
    ///
    /// On the deliverer's own thread it returns at once (see the type's discussion).
    func setDelegate(_ newValue: (any LogDelegate)?) {
        let me = pthread_self()
        // Held until the mutex is released, so that its `deinit` (which may log) runs unlocked.
        let replaced: (any LogDelegate)? = mutex.withLock {
            let replaced = state.delegate
            state.delegate = newValue
            state.generation &+= 1
            let generation = state.generation
            guard !isDeliverer(me) else { return replaced }
            state.waitingSetters += 1
            while hasUndelivered(before: generation) { deliveryEnded.wait(mutex) }
            state.waitingSetters -= 1
            return replaced
        }
        _ = replaced
    }

    /// Whether `thread` holds the deliverer role. The caller holds `mutex`.
    private func isDeliverer(_ thread: pthread_t) -> Bool {
        if case .heldBy(let deliverer) = state.role { return pthread_equal(deliverer, thread) != 0 }
        return false
    }

    /// Whether a record queued before the delegate's `generation`-th set is still queued or being
    /// delivered. Entries are queued in generation order, so the front and the one in flight tell.
    private func hasUndelivered(before generation: UInt64) -> Bool {
        if let inFlight = state.inFlight, inFlight < generation { return true }
        if let first = state.pending.first, first.generation < generation { return true }
        return false
    }

    // MARK: - Logging

    /// Queues `record` for the delegate in force now, and delivers if nobody else is.
    ///
    /// A thread the package shares (a timer thread, see ``markCurrentThreadShared()``) never
    /// delivers: it hands the role to the delivery thread, so that a slow delegate cannot hold up
    /// the calls that thread owes to others.
    func deliver(_ record: Log.Record) {
        let me = pthread_self()
        let mayDeliver = !Self.isCurrentThreadShared
        enum Start { case queued, deliver(Entry), handedOff(startWorker: Bool) }
        let start: Start = mutex.withLock {
            guard state.pending.count < limits.maxBacklog else {
                countDrop(of: record.source)
                return .queued
            }
            state.pending.append(Entry(record: record, target: state.delegate, generation: state.generation))
            guard case .free = state.role else { return .queued }
            guard mayDeliver else { return .handedOff(startWorker: handToWorker()) }
            state.role = .heldBy(me)
            return takeNext(delivererName: record.threadName).map(Start.deliver) ?? .queued
        }
        var next: Entry?
        switch start {
        case .queued:
            return
        case .deliver(let entry):
            next = entry
        case .handedOff(let startWorker):
            guard startWorker, !self.startWorker() else { return }
            next = takeOverFromMissingWorker(me, delivererName: record.threadName)
        }
        var budget = mayDeliver ? limits.callerBudget : .max
        while next != nil {
            send(next.take()!)
            enum Then { case deliver(Entry), stop, startWorker }
            let then: Then = mutex.withLock {
                endDelivery()
                if budget > 0, let entry = takeNext(delivererName: record.threadName) {
                    budget -= 1
                    return .deliver(entry)
                }
                if state.pending.isEmpty {
                    state.role = .free
                    return .stop
                }
                return handToWorker() ? .startWorker : .stop
            }
            switch then {
            case .deliver(let entry):
                next = entry
            case .stop:
                return
            case .startWorker:
                if startWorker() { return }
                budget = .max
                next = takeOverFromMissingWorker(me, delivererName: record.threadName)
            }
        }
    }

    /// Hands the deliverer role to the delivery thread: wakes it, or says it must be started.
    /// The caller holds `mutex`, and records wait.
    ///
    /// - Returns: Whether the caller must start the delivery thread (``startWorker()``).
    private func handToWorker() -> Bool {
        state.role = .handedToWorker
        if state.workerAlive {
            handOff.signal()
            return false
        }
        state.workerAlive = true
        return true
    }

    /// Takes the role back after the delivery thread could not be started, to deliver here to the
    /// end: late beats lost. Nobody took the role meanwhile: it was handed to a worker that does
    /// not exist.
    ///
    /// - Returns: The next entry to deliver, or `nil` (the role is free again).
    private func takeOverFromMissingWorker(_ me: pthread_t, delivererName: String) -> Entry? {
        mutex.withLock {
            state.workerAlive = false
            guard let entry = takeNext(delivererName: delivererName) else {
                state.role = .free
                return nil
            }
            state.role = .heldBy(me)
            return entry
        }
    }

    // MARK: - Threads the package shares

    /// Marks the calling thread as one the package shares, whose records the delivery thread
    /// delivers (see ``deliver(_:)``). Called by a thread of the package as it starts.
    static func markCurrentThreadShared() {
        sharedThreadMark.current = UnsafeMutableRawPointer(bitPattern: 1)
    }

    private static var isCurrentThreadShared: Bool { sharedThreadMark.current != nil }

    private static let sharedThreadMark = ThreadLocalPointer()

    /// Counts a record of `source` that found the queue full. The caller holds `mutex`.
    private func countDrop(of source: Log.Source) {
        if let index = state.drops.firstIndex(where: { $0.source == source }) {
            state.drops[index].count += 1
        } else {
            state.drops.append((source, 1))
        }
    }

    /// Removes the next entry and marks it in flight; after a drop, queues the notices in the slot
    /// that frees. The caller holds `mutex` and the deliverer role.
    private func takeNext(delivererName: String) -> Entry? {
        guard let entry = state.pending.popFirst() else { return nil }
        state.inFlight = entry.generation
        if !state.drops.isEmpty {
            let date = Date()
            for (source, count) in state.drops {
                let notice = Log.Record(
                    source: source,
                    message: "dropped \(count) records: \(limits.maxBacklog) were already waiting for delivery",
                    threadName: delivererName, date: date, file: #fileID, line: #line)
                state.pending.append(Entry(record: notice, target: state.delegate, generation: state.generation))
            }
            state.drops.removeAll()
        }
        return entry
    }

    /// Calls `entry`'s target; `entry`, and with it the record and the target, is released when
    /// this returns, before the deliverer takes the lock again.
    private func send(_ entry: consuming Entry) {
        if let target = entry.target {
            target.log(entry.record)
        } else {
            ConsoleLog.write(entry.record)
        }
    }

    /// Marks the in-flight entry delivered. The caller holds `mutex`.
    private func endDelivery() {
        state.inFlight = nil
        if state.waitingSetters > 0 { deliveryEnded.broadcast() }
    }

    // MARK: - The delivery thread

    /// Starts the delivery thread. The caller has set `workerAlive`.
    ///
    /// - Returns: `false` if the system would not start a thread.
    private func startWorker() -> Bool {
        do {
            try NamedThread.start(name: limits.workerName) { [self] in runWorker() }
            return true
        } catch {
            return false
        }
    }

    /// The delivery thread's life: deliver whenever the role is handed over, until idle for
    /// ``Limits/workerKeepAlive``.
    private func runWorker() {
        let me = pthread_self()
        var next: Entry?
        mutex.lock()
        while true {
            if case .handedToWorker = state.role {
                state.role = .heldBy(me)
                next = takeNext(delivererName: limits.workerName)
                while next != nil {
                    mutex.unlock()
                    send(next.take()!)
                    mutex.lock()
                    endDelivery()
                    next = takeNext(delivererName: limits.workerName)
                }
                state.role = .free
            }
            let deadline = MonotonicInstant.now().advanced(by: limits.workerKeepAlive)
            var handedOver: Bool {
                if case .handedToWorker = state.role { return true }
                return false
            }
            while !handedOver, MonotonicInstant.now() < deadline {
                handOff.wait(mutex, until: deadline)
            }
            if !handedOver {
                state.workerAlive = false
                break
            }
        }
        mutex.unlock()
    }
}
