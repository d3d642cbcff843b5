// floor.*: what handing a closure from one thread to another costs on this machine with nothing
// in between: a single-producer/single-consumer ring whose consumer spins, never sleeps. Pool rows
// read "× floor" against it (a pool whose threads all run closures can go below one consumer).
// TimedWaiter: how late the kernel ends a bare timed wait, `timer.fire`'s floor contender.
import Foundation
import Glibc

/// The floor workloads, and which floor each pool row is read against.
enum FloorWorkloads {
    /// The floor of a workload's per-item rows, if it has one.
    static func floor(for workload: String) -> String? {
        if workload.hasPrefix("pool.throughput.free.") { return "floor.spsc.free" }
        if workload.hasPrefix("pool.throughput.") || workload.hasPrefix("pool.threads.")
            || workload == "pool.schedule.p1" || workload == "dedicated.throughput" {
            return "floor.spsc.shared"
        }
        return nil
    }

    /// `floor.spsc.shared` / `floor.spsc.free`: a million closures (sharing a capture, or
    /// capture-free) through a ``ClosureRing`` to one spinning consumer thread.
    static func spsc(scale: Scale, capture: Throughput.Capture) -> Workload {
        let run = Throughput(items: scale.size(1_000_000), capture: capture)
        return run.workload("floor.spsc.\(capture.rawValue)", [
            Contender(name: "floor", warmingUpOnATenth: { share in
                let ring = ClosureRing()
                let consumer = Thread { ring.consume() }
                consumer.name = "bench floor consumer"
                consumer.start()
                defer { ring.stop() }
                return try run.measure(ring, items: share.of(run.items))
            })
        ])
    }

    /// `floor.inline.shared` / `floor.inline.free`: one thread stores each closure in a slot and
    /// runs it: what a closure costs with no second thread at all.
    static func inline(scale: Scale, capture: Throughput.Capture) -> Workload {
        let run = Throughput(items: scale.size(1_000_000), capture: capture)
        return run.workload("floor.inline.\(capture.rawValue)", [
            Contender(name: "floor", warmingUpOnATenth: { share in measureInline(items: share.of(run.items), capture: capture) })
        ])
    }

    /// Stores each closure in the next of 1,024 slots and runs it at once. Written out here rather
    /// than as a ``PoolSubmitter`` for ``Throughput/measure(_:items:)``: through a submitter, the
    /// shared-capture item costs twice as much (measured), and the floor must be the least a
    /// closure costs.
    static func measureInline(items: Int, capture: Throughput.Capture) -> Measurement {
        let slots = SlotBuffer<(@Sendable () -> Void)?>(count: 1_024, initialValue: nil)
        let countdown = capture.countdown(items)
        let stopwatch = Stopwatch()
        switch capture {
        case .shared:
            for index in 0..<items {
                slots[index & 1_023] = { countdown.tick() }
                slots[index & 1_023]!()
            }
        case .free:
            for index in 0..<items {
                slots[index & 1_023] = { GlobalCountdown.shared.tick() }
                slots[index & 1_023]!()
            }
        }
        countdown.waitForAll()
        return stopwatch.perItem(items)
    }
}

/// A thread that sleeps until each of a list of deadlines in turn, on a `CLOCK_MONOTONIC` pthread
/// condition that nothing signals, and notes how late each wake is; with `work`, it is busy that
/// long after each (a deadline passed meanwhile is met at once): the least any one thread can do.
final class TimedWaiter: @unchecked Sendable {
    // Sendable: `mutex` and `condition` are pthread objects made to be shared; `lateness` is written
    // by the waiting thread only, and read after `done` (a semaphore) says it has finished.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let deadlines: [UInt64]
    private let work: Duration
    private let lateness: SlotBuffer<Double>
    private let done = Countdown(1)

    private init(deadlines: [UInt64], work: Duration) {
        self.deadlines = deadlines
        self.work = work
        lateness = SlotBuffer(count: deadlines.count, initialValue: 0)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Waits out `delays`, counted from now, earliest first, on a thread of its own, busy for
    /// `work` after each: each wake's lateness (µs), and the process CPU from the start to the end.
    static func measure(delays: [Duration], work: Duration = .zero) -> Measurement {
        let origin = Self.now()
        let waiter = TimedWaiter(deadlines: delays.map { origin + UInt64($0.nanoseconds) }.sorted(), work: work)
        let stopwatch = Stopwatch()
        let thread = Thread { waiter.run() }
        thread.name = "bench timedwait"
        thread.start()
        waiter.done.waitForAll()
        let cpu = stopwatch.cpuNanoseconds
        var measurement = Measurement()
        measurement.addLatencyPercentiles("lateness", samples: (0..<delays.count).map { waiter.lateness[$0] })
        measurement["process CPU"] = cpu / 1e6
        return measurement
    }

    private func run() {
        _ = Self.prctl?(29, 1, 0, 0, 0)  // PR_SET_TIMERSLACK: 1 ns, as ThreadKit's threads
        pthread_mutex_lock(mutex)
        for (index, deadline) in deadlines.enumerated() {
            var now = Self.now()
            var wake = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
            while now < deadline {
                pthread_cond_timedwait(condition, mutex, &wake)
                now = Self.now()
            }
            lateness[index] = Double(now - deadline) / 1_000
            if work > .zero { spin(for: work) }
        }
        pthread_mutex_unlock(mutex)
        done.tick()
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    // prctl is variadic, which Swift cannot call; its integer arguments pass as these fixed ones.
    private typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
    private static let prctl: Prctl? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "prctl")
        .map { unsafeBitCast($0, to: Prctl.self) }
}
