// Shared helpers for ThreadKit's tests. Other test files may use them; keep the API small.
//
// Swift Testing runs suites in parallel in one process, so process-wide facts (thread counts, CPU
// time) are measured per thread: threads are told apart by their kernel name (give every pool or
// timer a short name of its own), and CPU time is read from inside the thread that used it.

import Foundation
import Synchronization
@testable import ThreadKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Kernel threads

/// This process's threads as the Linux kernel reports them under `/proc/self/task`.
enum KernelThreads {
    /// The kernel id (tid) of the calling thread.
    static func currentID() -> Int32 {
        // "/proc/thread-self" links to "<pid>/task/<tid>" of the thread that reads it.
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        precondition(length > 0, "cannot read /proc/thread-self")
        let target = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return Int32(target.split(separator: "/").last!)!
    }

    /// The kernel ids of every thread alive in this process.
    static func ids() -> [Int32] {
        guard let directory = opendir("/proc/self/task") else { return [] }
        defer { closedir(directory) }
        var result: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if let id = Int32(name) { result.append(id) }
        }
        return result
    }

    /// The kernel name (`comm`, at most 15 bytes) of thread `id`, or `nil` if it has exited.
    static func name(ofThread id: Int32) -> String? {
        guard let text = readProcFile("/proc/self/task/\(id)/comm") else { return nil }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    /// The calling thread's kernel name.
    static func currentName() -> String {
        name(ofThread: currentID()) ?? ""
    }

    /// The kernel names of every thread alive in this process.
    static func names() -> [String] {
        ids().compactMap { name(ofThread: $0) }
    }

    private static let uniqueNames = Atomic<Int>(0)

    /// A thread name no other test uses: `prefix` and a fresh number, within the 15 bytes the kernel keeps.
    static func uniqueName(_ prefix: String) -> String {
        let number = uniqueNames.add(1, ordering: .relaxed).newValue
        let name = "\(prefix)\(String(number, radix: 36))"
        precondition(name.utf8.count <= 15, "thread name \(name) is longer than the kernel keeps")
        return name
    }

    /// The ids of the live threads whose kernel name starts with `prefix`.
    static func ids(withPrefix prefix: String) -> [Int32] {
        ids().filter { name(ofThread: $0)?.hasPrefix(prefix) ?? false }
    }

    /// The ids of the live threads whose kernel name is `name` exactly (a prefix search for one
    /// unique name would also find `<name>a`, a unique name made later from the same prefix).
    static func ids(named name: String) -> [Int32] {
        ids().filter { self.name(ofThread: $0) == name }
    }

    /// How many live threads have a kernel name that starts with `prefix`.
    static func count(withPrefix prefix: String) -> Int {
        ids(withPrefix: prefix).count
    }

    /// The kernel name prefix of every thread of the `ThreadPool` named `pool`: `"<pool> Thread"`.
    ///
    /// The kernel keeps 15 bytes, so the pool name must be short enough (at most 6 bytes) to leave
    /// room for the thread number; then the prefix matches that pool's threads and no other's.
    static func prefix(ofPool pool: String) -> String {
        let prefix = "\(pool) Thread"
        precondition(prefix.utf8.count <= 13, "pool name '\(pool)' is too long to count its threads exactly")
        return prefix
    }

    /// How many threads of the `ThreadPool` named `pool` the kernel has alive: those whose kernel
    /// name is the one the pool gives its thread N, `"<pool, cut to fit> Thread<N>"`.
    static func count(ofPool pool: String) -> Int {
        names().filter { name in
            guard let range = name.range(of: "Thread", options: .backwards),
                  let number = Int(name[range.upperBound...]) else { return false }
            return name == NamedThread.kernelName(for: pool, keepingSuffix: " Thread\(number)")
        }.count
    }

    /// The context switches thread `id` has made so far, from `/proc/self/task/<id>/status`.
    static func contextSwitches(ofThread id: Int32) -> (voluntary: Int, involuntary: Int)? {
        guard let status = readProcFile("/proc/self/task/\(id)/status") else { return nil }
        var voluntary: Int?
        var involuntary: Int?
        for line in status.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let value = Int(parts[1].trimmingCharacters(in: .whitespaces))
            if parts[0] == "voluntary_ctxt_switches" { voluntary = value }
            if parts[0] == "nonvoluntary_ctxt_switches" { involuntary = value }
        }
        guard let voluntary, let involuntary else { return nil }
        return (voluntary, involuntary)
    }

    private static func readProcFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(descriptor, &chunk, chunk.count)
            if count < 0 { return nil }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

// MARK: - Per-thread resource usage

/// The calling thread's own CPU time and context switches (`getrusage(RUSAGE_THREAD)`).
///
/// Read it twice from inside the same thread; the difference is what that thread alone used,
/// whatever the other tests running in parallel do.
struct ThreadUsage: Sendable {
    /// User plus system CPU time.
    var cpuTime: Duration
    /// Times the thread gave up the CPU to wait (blocking, sleeping).
    var voluntarySwitches: Int
    /// Times the scheduler took the CPU away.
    var involuntarySwitches: Int

    /// The calling thread's usage so far.
    static func current() -> ThreadUsage {
        var usage = rusage()
        let result = getrusage(__rusage_who_t(1), &usage)  // 1 is RUSAGE_THREAD, hidden behind _GNU_SOURCE
        precondition(result == 0, "getrusage(RUSAGE_THREAD) failed")
        func duration(_ time: timeval) -> Duration {
            .seconds(Int64(time.tv_sec)) + .microseconds(Int64(time.tv_usec))
        }
        return ThreadUsage(
            cpuTime: duration(usage.ru_utime) + duration(usage.ru_stime),
            voluntarySwitches: Int(usage.ru_nvcsw), involuntarySwitches: Int(usage.ru_nivcsw))
    }
}

// MARK: - Counting and recording across threads

/// A thread-safe counter.
final class Counter: Sendable {
    private let storage = Atomic<Int>(0)

    init() {}

    /// Adds one (or `amount`) and returns the new value.
    /// Ordered (acquire and release), so that whoever sees the count also sees what came before it.
    @discardableResult
    func increment(by amount: Int = 1) -> Int {
        storage.wrappingAdd(amount, ordering: .acquiringAndReleasing).newValue
    }

    var value: Int { storage.load(ordering: .acquiring) }
}

/// One thread-safe counter per index, for "every task ran exactly once" checks.
final class AtomicCounters: @unchecked Sendable {
    // Sendable: the pointer never changes and every element is an atomic.
    private let base: UnsafeMutablePointer<Atomic<Int>>
    let count: Int

    init(count: Int) {
        self.count = count
        base = .allocate(capacity: count)
        for index in 0..<count { (base + index).initialize(to: Atomic(0)) }
    }

    deinit {
        base.deinitialize(count: count)
        base.deallocate()
    }

    func increment(_ index: Int) {
        base[index].wrappingAdd(1, ordering: .relaxed)
    }

    subscript(index: Int) -> Int {
        base[index].load(ordering: .relaxed)
    }

    /// Every counter's value, in index order.
    var values: [Int] { (0..<count).map { self[$0] } }

    /// The indices whose counter is not `expected`, for a readable failure message.
    func indices(notEqualTo expected: Int) -> [Int] {
        (0..<count).filter { self[$0] != expected }
    }
}

/// A value shared between threads, guarded by a lock.
///
/// Locked with `NSLock` (a pthread mutex) rather than `Synchronization.Mutex`, whose futex-based
/// lock the thread sanitizer cannot see on Linux: it would report races that are not there.
final class LockedValue<Value: Sendable>: @unchecked Sendable {
    // Sendable: `storage` is only touched under `lock`.
    private let lock = NSLock()
    private var storage: Value

    init(_ value: Value) {
        storage = value
    }

    /// Runs `body` on the value under the lock; read, change and write back in one step with this.
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try lock.withLock { try body(&storage) }
    }

    /// The value now; setting it replaces it (not a read-modify-write: use ``withLock(_:)`` for that).
    var value: Value {
        get { withLock { $0 } }
        set { withLock { $0 = newValue } }
    }
}

/// A thread-safe, append-only list of values, kept in the order they were appended.
///
/// Locked with `NSLock` (a pthread mutex), like ``LockedValue``.
final class Recorder<Element: Sendable>: @unchecked Sendable {
    // Sendable: `storage` is only touched under `lock`.
    private let lock = NSLock()
    private var storage: [Element] = []

    init() {}

    func append(_ element: Element) {
        lock.withLock { storage.append(element) }
    }

    var values: [Element] { lock.withLock { storage } }
    var count: Int { lock.withLock { storage.count } }
}

// MARK: - Blocking and waiting

/// A countdown latch: ``wait(timeout:)`` returns once ``countDown()`` was called `count` times.
///
/// Every wait has a timeout so that a broken component fails its test instead of hanging it.
final class Latch: @unchecked Sendable {
    // Sendable: `remaining` is only touched under `condition`'s lock.
    private let condition = NSCondition()
    private var remaining: Int

    init(count: Int = 1) {
        remaining = count
    }

    func countDown() {
        condition.withLock {
            remaining = max(0, remaining - 1)
            condition.broadcast()
        }
    }

    var isOpen: Bool { condition.withLock { remaining == 0 } }

    /// Blocks until the count reaches zero or `timeout` passes; `true` if it reached zero.
    @discardableResult
    func wait(timeout: Duration = .seconds(30)) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(timeout.components.seconds)
            + Double(timeout.components.attoseconds) / 1e18)
        return condition.withLock {
            while remaining > 0 {
                if !condition.wait(until: deadline) { return remaining == 0 }
            }
            return true
        }
    }
}

/// Polls `condition` every `interval` until it holds or `timeout` passes, suspending (not blocking a
/// Swift concurrency thread) in between. Returns whether it held.
///
/// The condition is checked once more after any stall, before the timeout counts: exit tests
/// block Swift concurrency's threads while their child process runs, which can delay a poll.
func eventually(
    timeout: Duration = .seconds(10), pollingEvery interval: Duration = .milliseconds(5),
    _ condition: () -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: interval)
    }
    return true
}

/// Runs `body(index)` for each index in `0..<count`, each on a new thread of its own, all released
/// at once, and suspends until every one has returned.
func onThreads(_ count: Int, _ body: @escaping @Sendable (_ index: Int) -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let start = Latch(count: 1)
        let running = Counter()
        for index in 0..<count {
            let thread = Thread {
                start.wait()
                body(index)
                if running.increment() == count { continuation.resume() }
            }
            thread.start()
        }
        start.countDown()
    }
}

/// Runs `body` on a new thread (named `name`, if given, as ``startThread(named:_:)`` names it) and
/// suspends until it returns its result, so that blocking test code never holds one of Swift
/// concurrency's few threads.
func onNewThread<Result: Sendable>(named name: String? = nil, _ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        Thread {
            if let name { NamedThread.nameCurrentThread(name) }
            continuation.resume(returning: body())
        }.start()
    }
}

/// Starts a thread that names itself `name` (in Foundation and the kernel) and runs `body`.
///
/// The name is set from inside the thread, through ThreadKit, which also sets the kernel's name: on
/// Linux, Foundation drops a name set before `start()` (the thread inherits its creator's) and reads
/// names back from the kernel, 15 bytes at most.
func startThread(named name: String, _ body: @escaping @Sendable () -> Void) {
    Thread {
        NamedThread.nameCurrentThread(name)
        body()
    }.start()
}

// MARK: - Lifetimes

/// Counts the live ``LifetimeTracked`` instances it made, to prove closures and values are released.
final class LifetimeTracker: Sendable {
    private let live = Atomic<Int>(0)

    init() {}

    /// A new tracked instance; it counts as live until it is deinitialised.
    func make() -> LifetimeTracked {
        live.wrappingAdd(1, ordering: .relaxed)
        return LifetimeTracked(tracker: self)
    }

    fileprivate func released() {
        live.wrappingSubtract(1, ordering: .relaxed)
    }

    /// Instances made and not yet deinitialised.
    var liveCount: Int { live.load(ordering: .relaxed) }
}

/// An object whose deinitialisation its ``LifetimeTracker`` counts.
final class LifetimeTracked: Sendable {
    private let tracker: LifetimeTracker

    fileprivate init(tracker: LifetimeTracker) {
        self.tracker = tracker
    }

    deinit {
        tracker.released()
    }
}

/// A closure that captures a fresh ``LifetimeTracked`` of `tracker` and counts its runs; nothing
/// else holds the tracked object.
func trackedWork(_ tracker: LifetimeTracker, _ ran: Counter) -> @Sendable () -> Void {
    let object = tracker.make()
    return { withExtendedLifetime(object) { _ = ran.increment() } }
}


extension Duration {
    /// The duration in seconds as a `Double`, for Foundation's sleeps.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

// MARK: - Thread starts

/// Makes the system refuse new threads for a while, as it does when memory or a limit runs out.
enum ThreadStarts {
    private typealias SetDefaultAttributes = @convention(c) (UnsafePointer<pthread_attr_t>) -> Int32

    /// Runs `body` while every `pthread_create` that uses default attributes fails with `EAGAIN`:
    /// their stack size is set to 32 TiB, which no machine can map (Linux's address space
    /// limit makes this work under the thread sanitizer too, where a resource limit would stop the
    /// sanitizer's own allocations). Call it only in a process of its own.
    static func refused<Result>(_ body: () -> Result) -> Result {
        let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setattr_default_np")!
        let setDefault = unsafeBitCast(symbol, to: SetDefaultAttributes.self)
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        var original = 0
        pthread_attr_getstacksize(&attributes, &original)
        pthread_attr_setstacksize(&attributes, 1 << 45)
        precondition(setDefault(&attributes) == 0)
        defer {
            pthread_attr_setstacksize(&attributes, original)
            precondition(setDefault(&attributes) == 0)
        }
        return body()
    }
}

/// Runs `body` on a thread of its own and gives up after `timeout`, so that a hang (a deadlock, a
/// lost wakeup) fails the test instead of hanging the suite; `nil` when it gave up.
func guarded<Result: Sendable>(timeout: Duration = .seconds(10), _ body: @escaping @Sendable () -> Result) async -> Result? {
    await onNewThread { () -> Result? in
        let done = Latch()
        let value = LockedValue<Result?>(nil)
        Thread {
            value.value = body()
            done.countDown()
        }.start()
        return done.wait(timeout: timeout) ? value.value : nil
    }
}
