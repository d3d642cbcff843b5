// The measuring tools every workload shares: completion counting, sample buffers, clocks for
// wall time and CPU time, the C heap, and producer threads. Resident memory, thread counts and
// durations as numbers come from ToolHarness.
import Dispatch
import Foundation
import Glibc
import Synchronization
import ToolHarness

// MARK: - Completion

/// Counts work items down to zero and wakes one waiter when the last one has run.
///
/// Each item calls ``tick()``: one atomic decrement (`lock xadd` on x86; the ordering is
/// acquire-release so that everything the items wrote is visible to the waiter). The counter has 64
/// bytes of padding on each side, so no other data shares its cache line. Only the item that brings
/// the count to zero signals the semaphore; the waiter sleeps on it. Every implementation of every
/// workload counts with this same type.
final class Countdown: Sendable {
    private let done = DispatchSemaphore(value: 0)
    private let paddingBefore: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let remaining: Atomic<Int>
    private let paddingAfter: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)

    init(_ count: Int) {
        precondition(count > 0, "a countdown needs at least one item, got \(count)")
        remaining = Atomic(count)
    }

    /// A countdown with nothing to count until ``arm(_:)``.
    init() {
        remaining = Atomic(0)
    }

    /// Starts counting `count` items down: only when no item of an earlier count is still to tick.
    func arm(_ count: Int) {
        precondition(count > 0, "a countdown needs at least one item, got \(count)")
        remaining.store(count, ordering: .releasing)
    }

    /// Marks one item done; the last one wakes the waiter.
    @inline(__always)
    func tick() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            done.signal()
        }
    }

    /// Blocks until every item has ticked.
    func waitForAll() {
        done.wait()
    }
}

/// The one countdown that capture-free items tick: a closure that names a global captures nothing.
enum GlobalCountdown {
    static let shared = Countdown()
}

// MARK: - Sample buffers

/// A fixed array that items running on other threads write to, each at its own index.
///
/// Allocated and filled before timing starts, so no item allocates or touches a new page. Read it
/// only after the items' ``Countdown`` has reached zero, which orders their writes before the read.
final class SlotBuffer<Element: Sendable>: @unchecked Sendable {
    // Sendable: each slot is written by one item and read after the countdown, never both at once.
    let count: Int
    private let base: UnsafeMutablePointer<Element>

    init(count: Int, initialValue: Element) {
        self.count = count
        base = .allocate(capacity: count)
        base.initialize(repeating: initialValue, count: count)
    }

    deinit {
        base.deinitialize(count: count)
        base.deallocate()
    }

    @inline(__always)
    subscript(index: Int) -> Element {
        get { base[index] }
        set { base[index] = newValue }
    }
}

typealias InstantBuffer = SlotBuffer<ContinuousClock.Instant>

extension SlotBuffer where Element == ContinuousClock.Instant {
    convenience init(count: Int) {
        self.init(count: count, initialValue: ContinuousClock.now)
    }
}

// MARK: - Time

extension Duration {
    /// The same duration for Dispatch, to the nanosecond.
    var dispatchInterval: DispatchTimeInterval {
        .nanoseconds(Int(nanoseconds.rounded()))
    }
}

/// Process CPU time (user + system, every thread), from `getrusage(RUSAGE_SELF)`.
enum ProcessCPU {
    /// CPU time used by the process so far, in nanoseconds.
    static func nanoseconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func ns(_ time: timeval) -> Double { Double(time.tv_sec) * 1e9 + Double(time.tv_usec) * 1e3 }
        return ns(usage.ru_utime) + ns(usage.ru_stime)
    }
}

/// The CPU time of each of the process's threads, read through Linux's per-thread CPU clocks.
enum ThreadCPU {
    /// Nanoseconds of CPU time used so far by each thread of this process but the calling one, by
    /// thread id. A thread's clock is `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` of the kernel:
    /// `(~tid << 3) | 6`, which `clock_gettime` accepts for any thread of the process.
    static func others() -> [Int32: Double] {
        // The calling thread's id: `/proc/thread-self` links to `<pid>/task/<tid>`.
        let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
        let me = Int32(link.split(separator: "/").last ?? "") ?? -1
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return [:] }
        var times: [Int32: Double] = [:]
        for entry in entries {
            guard let tid = Int32(entry), tid != me else { continue }
            var time = timespec()
            if clock_gettime(clockid_t((~tid) << 3 | 6), &time) == 0 {
                times[tid] = Double(time.tv_sec) * 1e9 + Double(time.tv_nsec)
            }
        }
        return times
    }
}

/// Wall time and process CPU time over one stretch of work.
struct Stopwatch {
    private let wallStart = ContinuousClock.now
    private let cpuStart = ProcessCPU.nanoseconds()

    /// Nanoseconds of wall time since the stopwatch was made.
    var wallNanoseconds: Double { (ContinuousClock.now - wallStart).nanoseconds }

    /// Nanoseconds of process CPU time since the stopwatch was made.
    var cpuNanoseconds: Double { ProcessCPU.nanoseconds() - cpuStart }

    /// Wall and CPU time since the stopwatch was made, per one of `count` items: the metrics
    /// `wall per <item>` and `CPU per <item>`, in ns.
    func perItem(_ count: Int, item: String = "item") -> Measurement {
        let wall = wallNanoseconds, cpu = cpuNanoseconds
        return Measurement(values: ["wall per \(item)": wall / Double(count), "CPU per \(item)": cpu / Double(count)])
    }
}

/// Busy-waits for `duration`: work of a known length that does not depend on the scheduler.
func spin(for duration: Duration) {
    let end = ContinuousClock.now + duration
    while ContinuousClock.now < end {}
}

/// Sleeps until `deadline` on `CLOCK_MONOTONIC`, as an absolute deadline (no drift from a loop).
func sleep(untilMonotonic deadline: timespec) {
    var deadline = deadline
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil) == EINTR {}
}

/// The current time of `CLOCK_MONOTONIC`.
func monotonicNow() -> timespec {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now
}

extension timespec {
    /// This time moved `nanoseconds` later.
    func advanced(byNanoseconds nanoseconds: Int) -> timespec {
        let total = Int(tv_sec) * 1_000_000_000 + Int(tv_nsec) + nanoseconds
        return timespec(tv_sec: total / 1_000_000_000, tv_nsec: total % 1_000_000_000)
    }
}

// MARK: - Memory

/// The process's memory, as the kernel and the C heap see it.
enum Memory {
    private typealias MallocTrim = @convention(c) (Int) -> Int32
    private static let mallocTrim: MallocTrim? = {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(address, to: MallocTrim.self)
    }()

    /// `mallinfo2()`, which the Glibc module does not import (it lives in `<malloc.h>`). It returns
    /// a 80-byte struct, which the x86-64 System V ABI returns through a hidden pointer: the caller
    /// passes the destination in the first argument register and gets it back in `rax`, exactly
    /// the ABI of `void *f(void *destination)`, the type it is called through here. Other
    /// architectures pass that pointer elsewhere (`x8` on arm64), so there it is not called.
    private typealias MallInfo2 = @convention(c) (UnsafeMutableRawPointer) -> UnsafeMutableRawPointer?
    private static let mallInfo2: MallInfo2? = {
        #if arch(x86_64)
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallinfo2") else { return nil }
        return unsafeBitCast(address, to: MallInfo2.self)
        #else
        return nil
        #endif
    }()

    /// Bytes the C heap has handed out and not had back: `uordblks + hblkhd` of `mallinfo2()`
    /// (small blocks in use, and blocks mapped on their own). Unlike the resident set it does not
    /// depend on what earlier frees left mapped. `nil` where `mallinfo2` cannot be called.
    static func heapInUse() -> Int? {
        guard let mallInfo2 else { return nil }
        // struct mallinfo2: arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost.
        let fields = UnsafeMutablePointer<Int>.allocate(capacity: 10)
        defer { fields.deallocate() }
        fields.initialize(repeating: 0, count: 10)
        _ = mallInfo2(UnsafeMutableRawPointer(fields))
        return fields[7] + fields[4]
    }

    /// Gives freed heap memory back to the kernel (`malloc_trim(0)`), where the C library has it.
    static func trim() {
        _ = mallocTrim?(0)
    }
}

// MARK: - Threads

/// Starts `count` threads that each run `body(index)` once `start` is opened, and returns once
/// every one of them is running, so starting them is not part of what is timed.
final class ProducerThreads: Sendable {
    private let gate = DispatchSemaphore(value: 0)
    private let count: Int

    init(count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        self.count = count
        let ready = DispatchSemaphore(value: 0)
        for index in 0..<count {
            let thread = Thread { [gate] in
                ready.signal()
                gate.wait()
                body(index)
            }
            thread.name = "bench producer \(index + 1)"
            thread.start()
        }
        for _ in 0..<count { ready.wait() }
    }

    /// Lets every producer go.
    func start() {
        for _ in 0..<count { gate.signal() }
    }
}

/// Hands out 0, 1, 2 … to whoever asks (the runs of a repeating call, starting tasks).
final class RunCounter: Sendable {
    private let value = Atomic<Int>(0)

    func take() -> Int {
        value.add(1, ordering: .relaxed).oldValue
    }
}
