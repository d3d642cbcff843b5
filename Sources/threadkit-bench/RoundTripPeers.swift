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
