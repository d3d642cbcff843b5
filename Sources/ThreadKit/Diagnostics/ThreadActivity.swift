#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What one thread is doing, as ``Diagnostics`` reports it: running (what, since when), spinning,
/// sleeping (until when) or blocked (in which wait, for what, since when).
///
/// Every thread ThreadKit starts has one from its first instruction (``NamedThread``); any other
/// thread gets one the first time it blocks in one of ThreadKit's waits. The thread itself writes
/// it, at the moments its state changes anyway (it spins, goes to sleep, wakes, blocks), never for
/// a task that finds the next one waiting. A snapshot reads it under its own small lock.
///
/// `package`: ThreadKitURL and ThreadKitRedis report their threads and waits through it too.
package final class ThreadActivity: @unchecked Sendable {
    // Sendable: `state` is guarded by `mutex`; everything else is a constant.
    /// The thread's whole name.
    package let name: String
    /// The name the kernel shows.
    package let kernelName: String
    /// The kernel's thread id.
    package let kernelThreadID: Int32
    private let mutex = PThreadMutex()
    private var state: State

    /// A thread's state, as the thread last set it.
    struct State {
        var phase: Snapshot.Thread.State
        var since: MonotonicInstant
        var until: MonotonicInstant?
        var work: String?
        var wait: Blocked?
    }

    /// A blocking wait: its kind (`"sync"`) and what it waits for.
    struct Blocked {
        var kind: String
        var target: WaitTarget
    }

    /// What a blocked thread waits for: a serial context (found its holder through the context's
    /// kind), or another object of ThreadKit's that knows who holds it.
    enum WaitTarget {
        case context(SerialContext)
        case object(any DiagnosticsWaitTarget)
    }

    private init(name: String, kernelName: String) {
        self.name = name
        self.kernelName = kernelName
        kernelThreadID = Self.currentKernelThreadID()
        state = State(phase: .running, since: .now())
        Self.all.withLock { $0[ObjectIdentifier(self)] = Weak(self) }
    }

    deinit {
        Self.all.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(self)) }
    }

    /// Gives the calling thread, just started by ThreadKit, its activity: running, from now.
    static func startCurrent(name: String, kernelName: String) {
        perThread.current = ThreadActivity(name: name, kernelName: kernelName)
    }

    /// The calling thread's activity; made on first use for a thread ThreadKit did not start.
    package static var current: ThreadActivity {
        if let activity = perThread.current { return activity }
        let activity = ThreadActivity(name: NamedThread.currentName(), kernelName: NamedThread.currentKernelName())
        perThread.current = activity
        return activity
    }

    /// The calling thread's activity if it has one; never makes one.
    static var currentIfAny: ThreadActivity? { perThread.current }

    // MARK: - Changes, made by the thread itself

    /// The thread runs `work` (a label, or the kind of work) from now on.
    package func running(_ work: String? = nil) {
        set(State(phase: .running, since: .now(), work: work))
    }

    /// The thread looks for work for a moment before it sleeps.
    package func spinning() {
        set(State(phase: .spinning, since: .now()))
    }

    /// The thread sleeps until woken, or until `deadline`.
    package func sleeping(until deadline: ContinuousClock.Instant? = nil) {
        set(State(phase: .sleeping, since: .now(), until: deadline.map(MonotonicInstant.init)))
    }

    /// The thread sleeps until woken, or until `deadline`.
    func sleeping(until deadline: MonotonicInstant) {
        set(State(phase: .sleeping, since: .now(), until: deadline))
    }

    /// Runs `body`, work its submitter labelled `label`, with the thread reporting that label as
    /// its work meanwhile (and the time it started), then what it reported before.
    ///
    /// The one way a `label:` given on submission reaches the dump: a labelled submission wraps its
    /// work in this, so unlabelled work pays nothing.
    package static func labelled<T, Failure: Error>(_ label: String, _ body: () throws(Failure) -> T) throws(Failure) -> T {
        let activity = current
        let before = activity.exchange(State(phase: .running, since: .now(), work: label))
        defer { activity.set(before) }
        return try body()
    }

    /// Runs `body`, a blocking wait of `kind` (`"sync"`, `"wait"`) for `target`, with the thread
    /// reported blocked for as long as it lasts, then as it was before.
    package func blocked<T, Failure: Error>(
        _ kind: String, on target: any DiagnosticsWaitTarget, _ body: () throws(Failure) -> T
    ) throws(Failure) -> T {
        try blocked(kind, on: .object(target), body)
    }

    /// ``blocked(_:on:_:)`` for a wait on a serial context.
    func blocked<T, Failure: Error>(_ kind: String, on target: WaitTarget, _ body: () throws(Failure) -> T) throws(Failure) -> T {
        let before = exchange(State(phase: .blocked, since: .now(), wait: Blocked(kind: kind, target: target)))
        defer { set(before) }
        return try body()
    }

    private func set(_ new: State) {
        // The old state (a label, a wait's target) is released after the lock is let go.
        _ = exchange(new)
    }

    private func exchange(_ new: State) -> State {
        mutex.lock()
        let old = state
        state = new
        mutex.unlock()
        return old
    }

    // MARK: - Reading, by a snapshot

    /// The state as last set: one brief hold of the thread's lock.
    func read() -> State {
        mutex.withLock { state }
    }

    /// Every thread that has an activity, alive now (read once each, outside the registry's lock).
    static func allAlive() -> [ThreadActivity] {
        all.withLock { $0.values.compactMap(\.object) }
    }

    // MARK: - Storage

    private static let perThread = ThreadLocalObject<ThreadActivity>()
    private static let all = Locked([ObjectIdentifier: Weak]())

    private struct Weak: @unchecked Sendable {
        // Sendable: a weak reference is loaded atomically; the object is `Sendable`.
        weak var object: ThreadActivity?
        init(_ object: ThreadActivity) { self.object = object }
    }

    #if canImport(Glibc) || canImport(Musl)
    private typealias GetTID = @convention(c) () -> Int32
    private static let getTID: GetTID? = {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "gettid") else { return nil }
        return unsafeBitCast(address, to: GetTID.self)
    }()
    #endif

    /// The calling thread's kernel id: `gettid()`, or where the C library lacks it (glibc before
    /// 2.30), the last part of `/proc/thread-self`'s link (`<pid>/task/<tid>`).
    static func currentKernelThreadID() -> Int32 {
        #if canImport(Glibc) || canImport(Musl)
        if let getTID { return getTID() }
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        let link = length > 0 ? String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        return link.split(separator: "/").last.flatMap { Int32($0) } ?? 0
        #else
        var id: UInt64 = 0
        pthread_threadid_np(nil, &id)
        return Int32(truncatingIfNeeded: id)
        #endif
    }
}

/// Something a thread can block in a wait for, which knows the thread that must act first: a
/// dedicated thread's core, a throttled queue, a scheduled task, a pool with a full queue….
///
/// Both members are read by a snapshot, from another thread, with no lock of the snapshot's held:
/// they may take the object's own lock briefly, and must never call user code.
package protocol DiagnosticsWaitTarget: AnyObject, Sendable {
    /// What is waited for, as messages name it: `DedicatedThread "db"`, `a task of ThreadPool "io"`.
    var waitDescription: String { get }
    /// The thread that runs or holds it now, if one does.
    var holdingThread: ThreadActivity? { get }
}
