import Foundation
import Testing
@testable import ThreadKit

/// Issue 7, finding 10: a private `TimerThread` released without `dispose()` kept its thread forever,
/// because the thread held the timer. Now a released timer runs its pending one-shot calls (each
/// still cancellable through its handle), stops its repeating calls, and its thread exits.
///
/// Threads are told apart by their kernel name, unique per test.
@Suite struct TimerThreadLifetimeTests {
    /// Whether the kernel still lists a thread named `name`.
    static func isAlive(_ name: String) -> Bool {
        KernelThreads.names().contains(name)
    }

    @Test("A private TimerThread released without dispose() runs its pending calls, then its thread exits")
    func releasedTimerRunsPendingCallsThenExits() async throws {
        let name = KernelThreads.uniqueName("TmGone")
        let ran = Recorder<Int>()
        let early = Counter()
        let held: TimerHandle
        let scheduledAt = MonotonicInstant.now()
        do {
            let timer = TimerThread(name: name)
            for index in 0..<3 {
                let delay = Duration.milliseconds(150 + 50 * index)
                try timer.schedule(after: delay) {
                    if MonotonicInstant.now() < scheduledAt.advanced(by: delay) { early.increment() }
                    ran.append(index)
                }
            }
            held = try timer.schedule(after: .milliseconds(200), tag: "held") { ran.append(3) }
            #expect(await eventually { Self.isAlive(name) })
        }
        // Nothing references the timer any more; its calls are still due, and run.
        #expect(await eventually(timeout: .seconds(5)) { ran.count == 4 })
        #expect(await eventually(timeout: .seconds(3)) { !Self.isAlive(name) }, "the timer thread \(name) is still alive")
        #expect(ran.values.sorted() == [0, 1, 2, 3])
        #expect(early.value == 0)
        #expect(held.hasFired)
        #expect(!held.isCancelled)
        #expect(!held.cancel())
    }

    @Test("A released timer's pending call can still be cancelled through its handle, and then its thread exits")
    func releasedTimerCallCancelledThroughItsHandle() async throws {
        let name = KernelThreads.uniqueName("TmGoneC")
        let ran = Counter()
        let handle: TimerHandle
        do {
            let timer = TimerThread(name: name)
            handle = try timer.schedule(after: .seconds(3600)) { ran.increment() }
            try timer.schedule(after: .zero) {}  // starts the thread
            #expect(await eventually { Self.isAlive(name) })
        }
        // The pending call keeps the thread: it is still due in an hour, and the handle may cancel it.
        try await Task.sleep(for: .milliseconds(100))
        #expect(Self.isAlive(name))
        #expect(!handle.isCancelled)
        #expect(handle.cancel())
        #expect(handle.isCancelled)
        #expect(!handle.cancel())
        #expect(await eventually(timeout: .seconds(3)) { !Self.isAlive(name) }, "the timer thread \(name) is still alive")
        #expect(ran.value == 0)
    }

    @Test("Releasing a timer stops its repeating calls, mid-run or waiting; their handles report it")
    func releasedTimerStopsRepeatingCalls() async throws {
        let name = KernelThreads.uniqueName("TmGoneR")
        let waitingRuns = Counter()
        let runningRuns = Counter()
        let started = Latch()
        let gate = Latch()
        let waiting: TimerHandle
        let running: TimerHandle
        do {
            let timer = TimerThread(name: name)
            waiting = try timer.schedule(every: .milliseconds(20)) { waitingRuns.increment() }
            #expect(await eventually { waitingRuns.value >= 2 })
            running = try timer.schedule(every: .milliseconds(20)) {
                runningRuns.increment()
                started.countDown()
                gate.wait(timeout: .seconds(60))
            }
            #expect(await onNewThread { started.wait(timeout: .seconds(5)) })
        }
        // Released while one repeating call runs and the other waits for its next beat.
        #expect(waiting.isCancelled)
        #expect(running.isCancelled)
        #expect(!waiting.cancel())
        #expect(!running.cancel())
        let waitingAtRelease = waitingRuns.value
        gate.countDown()
        #expect(await eventually(timeout: .seconds(3)) { !Self.isAlive(name) }, "the timer thread \(name) is still alive")
        try await Task.sleep(for: .milliseconds(60))
        #expect(waitingRuns.value == waitingAtRelease)
        #expect(runningRuns.value == 1)
        #expect(waiting.hasFired)
        #expect(running.hasFired)
    }

    @Test("A call that captures its timer keeps it until the call has run; then the thread exits")
    func callCapturingItsTimerKeepsItUntilItRan() async throws {
        let name = KernelThreads.uniqueName("TmGoneS")
        let seen = LockedValue<Int?>(nil)
        do {
            let timer = TimerThread(name: name)
            try timer.schedule(after: .milliseconds(100)) { seen.value = timer.pendingCount }
        }
        #expect(await eventually(timeout: .seconds(5)) { seen.value != nil })
        #expect(seen.value == 0)
        #expect(await eventually(timeout: .seconds(3)) { !Self.isAlive(name) }, "the timer thread \(name) is still alive")
    }

    @Test("A released timer drops calls due so far out that they never run, and its thread exits")
    func releasedTimerDropsCallsThatNeverRun() async throws {
        let name = KernelThreads.uniqueName("TmGoneN")
        let held: TimerHandle
        do {
            let timer = TimerThread(name: name)
            held = try timer.schedule(after: .seconds(Int64.max)) { Issue.record("a call due never ran") }
            try timer.schedule(at: .now + .seconds(Int64.max)) { Issue.record("a call due never ran") }
            try timer.schedule(after: .zero) {}
            #expect(await eventually { Self.isAlive(name) })
        }
        #expect(await eventually(timeout: .seconds(3)) { !Self.isAlive(name) }, "the timer thread \(name) is still alive")
        #expect(held.isCancelled)
        #expect(!held.hasFired)
        #expect(!held.cancel())
    }

    @Test("The closures a released timer drops are released after unlocking")
    func releasedTimerDropsClosuresOutsideTheLock() async throws {
        let name = KernelThreads.uniqueName("TmGoneL")
        let other = LockedValue<TimerHandle?>(nil)
        let otherCancelled = LockedValue<Bool?>(nil)
        // The timer is made and released on a thread of its own: a release that deadlocks fails the test.
        let returned = await TimerThreadReleaseTests.returns {
            let timer = TimerThread(name: name)
            let pending = try! timer.schedule(after: .seconds(3600)) {}
            other.value = pending
            try! timer.schedule(every: .seconds(3600), TimerThreadReleaseTests.work {
                otherCancelled.value = pending.cancel()
            })
        }
        #expect(returned, "releasing the timer deadlocked")
        guard returned else { return }
        #expect(otherCancelled.value == true)
        #expect(try #require(other.value).isCancelled)
        #expect(await eventually(timeout: .seconds(3)) { !Self.isAlive(name) }, "the timer thread \(name) is still alive")
    }

    @Test("A timer released before its first call starts no thread")
    func unusedTimerStartsNoThread() {
        let name = KernelThreads.uniqueName("TmGoneU")
        do {
            let timer = TimerThread(name: name)
            #expect(timer.pendingCount == 0)
        }
        #expect(!Self.isAlive(name))
    }
}
