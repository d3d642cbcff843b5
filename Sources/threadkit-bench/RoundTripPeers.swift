// The peers a blocking round trip to another thread is judged against (`dedicated.sync`,
// `dispatch.sync.held`): the floor, GCD reached with `async` and a semaphore, and swift-nio's shape.
import Dispatch
import Foundation
import Glibc
import Synchronization

/// A blocking call that runs `body` on another thread and returns once it has run.
protocol RoundTrip: Sendable {
    func call(_ body: @escaping @Sendable () -> Void)
    /// Ends the other thread.
    func stop()
}

/// The floor: one hand-off there and one back, with the cheapest wake the machine has — neither
/// side sleeps, and nothing is allocated: the caller puts the work in a slot and bumps a request
/// number; the other thread, watching that number, runs the work and bumps an answer number, which
/// the caller watches. Each yields its core only after 100 looks in vain (as ``ClosureRing`` does).
///
/// Nothing can go from one thread to another and back for less on this machine: no lock, no
/// queue, no allocation, no system call while the two threads are on their cores.
final class SpinRoundTrip: RoundTrip, @unchecked Sendable {
    // Sendable: `work` is written by the caller before its releasing store of `requested` and read
    // by the server after its acquiring load of it; the server's releasing store of `answered`
    // hands it back. One caller at a time.
    private let requested = Atomic<Int>(0)
    private let paddingBetween: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private let answered = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private var work: (@Sendable () -> Void)?
    private var calls = 0

    init() {
        let server = Thread { [self] in serve() }
        server.name = "bench floor round trip"
        server.start()
    }

    func call(_ body: @escaping @Sendable () -> Void) {
        calls += 1
        work = body
        requested.store(calls, ordering: .releasing)
        var polls = 0
        while answered.load(ordering: .acquiring) != calls { ClosureRing.backOff(&polls) }
        work = nil
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
    }

    private func serve() {
        var served = 0
        var polls = 0
        while !stopped.load(ordering: .acquiring) {
            let request = requested.load(ordering: .acquiring)
            guard request != served else {
                ClosureRing.backOff(&polls)
                continue
            }
            polls = 0
            work!()
            served = request
            answered.store(served, ordering: .releasing)
        }
    }
}

/// GCD's way to wait for work on a serial queue without running it on the caller's thread:
/// `async`, then a semaphore the work signals.
struct GCDAsyncAndWait: RoundTrip {
    let queue: DispatchQueue

    func call(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        queue.async {
            body()
            done.signal()
        }
        done.wait()
    }

    func stop() {}
}

/// swift-nio's shape of `eventLoop.submit { }.wait()`, built here (the package takes no
/// dependencies): the task is appended to the loop's list under a lock, the loop is woken through
/// its wake-up descriptor (a pipe it polls, as `SelectableEventLoop` polls its eventfd), and the
/// caller waits on a promise (a mutex and a condition, as `EventLoopFuture.wait()` does with its
/// `ConditionLock`).
final class NIOShapedLoop: RoundTrip, @unchecked Sendable {
    // Sendable: `tasks` and `stopping` are guarded by `lock`; the descriptors are constants.
    private let lock = NSLock()
    private var tasks: [@Sendable () -> Void] = []
    private var stopping = false
    private let wakeRead: Int32
    private let wakeWrite: Int32

    init() {
        var descriptors: [Int32] = [0, 0]
        precondition(pipe(&descriptors) == 0, "NIOShapedLoop: pipe() failed, errno \(errno)")
        (wakeRead, wakeWrite) = (descriptors[0], descriptors[1])
        _ = fcntl(wakeRead, F_SETFL, O_NONBLOCK)
        let loop = Thread { [self] in run() }
        loop.name = "bench NIO-shaped loop"
        loop.start()
    }

    func call(_ body: @escaping @Sendable () -> Void) {
        let promise = Promise()
        lock.withLock { tasks.append { body(); promise.succeed() } }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        promise.wait()
    }

    func stop() {
        lock.withLock { stopping = true }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// The loop: sleep in `poll` until woken, drain the wake-up bytes, run the tasks queued.
    private func run() {
        var drained = [UInt8](repeating: 0, count: 64)
        while true {
            var descriptor = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, -1)
            while read(wakeRead, &drained, drained.count) > 0 {}
            let (batch, stop) = lock.withLock {
                defer { tasks.removeAll(keepingCapacity: true) }
                return (tasks, stopping)
            }
            for task in batch { task() }
            if stop {
                close(wakeRead)
                close(wakeWrite)
                return
            }
        }
    }

    /// A promise the caller blocks on, as `EventLoopFuture.wait()` does.
    private final class Promise: @unchecked Sendable {
        // Sendable: `done` is guarded by `condition`.
        private let condition = NSCondition()
        private var done = false

        func succeed() {
            condition.withLock {
                done = true
                condition.signal()
            }
        }

        func wait() {
            condition.withLock {
                while !done { condition.wait() }
            }
        }
    }
}

/// The floor of `pool.wake`: the cheapest wake this machine has for one closure. One thread parks
/// on a bare futex word (private `FUTEX_WAIT`, no mutex, no queue); the submitter puts the closure
/// in a slot, sets the word and wakes the thread with one `FUTEX_WAKE`. No pool can start a closure
/// on a sleeping thread for less: the thread has nothing to look at but the word and the slot.
final class FutexParkedThread: PoolSubmitter, @unchecked Sendable {
    // Sendable: `slot` belongs to the submitter while the word is `empty` and to the parked thread
    // while it is `posted`; the releasing stores and acquiring loads of the word hand it over.
    // One submitter at a time.
    private static let empty: UInt32 = 0
    private static let posted: UInt32 = 1
    private static let stopping: UInt32 = 2
    private let word: UnsafeMutablePointer<Atomic<UInt32>>
    private var slot: (@Sendable () -> Void)?
    /// Whether the thread was started: with the first submission, so that only the floor's own
    /// process has it. The submitter's alone.
    private var started = false

    init() {
        word = .allocate(capacity: 1)
        word.initialize(to: Atomic(Self.empty))
    }

    deinit {
        word.deinitialize(count: 1)
        word.deallocate()
    }

    /// Waits (spinning) until the thread has taken the last closure, stores `work`, wakes the thread.
    func submit(_ work: @escaping @Sendable () -> Void) {
        if !started {
            started = true
            let parked = Thread { [self] in park() }
            parked.name = "bench floor parked thread"
            parked.start()
        }
        post(Self.posted) { slot = work }
    }

    /// Ends the thread, if it was started, once it has taken the last closure.
    func stop() {
        if started { post(Self.stopping) {} }
    }

    private func post(_ state: UInt32, filling fill: () -> Void) {
        var polls = 0
        while word.pointee.load(ordering: .acquiring) != Self.empty { ClosureRing.backOff(&polls) }
        fill()
        word.pointee.store(state, ordering: .releasing)
        _ = Self.futex(word, Self.wakeOp, 1)
    }

    /// The parked thread: sleeps while the word is empty, runs what the slot holds, and leaves
    /// the slot empty before running it.
    private func park() {
        while true {
            switch word.pointee.load(ordering: .acquiring) {
            case Self.empty:
                _ = Self.futex(word, Self.waitOp, Self.empty)  // returns at once if the word moved
            case Self.posted:
                let work = slot.take()!
                word.pointee.store(Self.empty, ordering: .releasing)
                work()
            default:
                return
            }
        }
    }

    /// `FUTEX_WAIT | FUTEX_PRIVATE_FLAG` (no timeout) and `FUTEX_WAKE | FUTEX_PRIVATE_FLAG`.
    private static let waitOp: Int32 = 0 | 128
    private static let wakeOp: Int32 = 1 | 128

    /// `syscall(SYS_futex, word, op, value, nil)`, looked up by name: Swift cannot call the
    /// variadic C function, and passes these fixed arguments as a variadic call would on Linux.
    private static func futex(_ word: UnsafeMutablePointer<Atomic<UInt32>>, _ op: Int32, _ value: UInt32) -> Int {
        syscallFunction(systemCallNumber, UnsafeMutableRawPointer(word), op, value, nil)
    }

    /// `SYS_futex`: 202 on x86_64, 98 in the generic table (arm64, riscv64).
    private static let systemCallNumber = {
        #if arch(x86_64)
        202
        #else
        98
        #endif
    }()
    private static let syscallFunction = unsafeBitCast(
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syscall")!,
        to: (@convention(c) (Int, UnsafeMutableRawPointer, Int32, UInt32, UnsafeRawPointer?) -> Int).self)
}
