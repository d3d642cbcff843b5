import Foundation
import Testing
@testable import ThreadKit

/// Issue 7, finding 9: the timer released closures (and tags, and handles) while its mutex was held,
/// so a capture whose `deinit` calls back into the same timer deadlocked: the caller of `cancel`,
/// `cancelAll` or `dispose`, or the timer thread itself, which stopped every call of that timer.
///
/// Each scenario that could hang runs on a thread of its own and is waited for with a timeout, so a
/// regression fails the test instead of hanging the run. A timer whose mutex may be stuck is never
/// touched again (no `defer { dispose() }`).
@Suite struct TimerThreadReleaseTests {
    /// Runs `action` when it is deinitialised: a capture whose `deinit` calls back into a timer.
    final class DeinitProbe: Sendable {
        private let action: @Sendable () -> Void

        init(_ action: @escaping @Sendable () -> Void) {
            self.action = action
        }

        deinit {
            action()
        }
    }

    /// A tag whose `deinit` calls back into a timer.
    final class ProbeTag: Hashable, Sendable {
        private let action: @Sendable () -> Void

        init(_ action: @escaping @Sendable () -> Void) {
            self.action = action
        }

        deinit {
            action()
        }

        static func == (lhs: ProbeTag, rhs: ProbeTag) -> Bool { lhs === rhs }

        func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    }

    /// A closure whose only capture is a fresh ``DeinitProbe`` that runs `action`.
    static func work(releasing action: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let probe = DeinitProbe(action)
        return { withExtendedLifetime(probe) {} }
    }

    /// Runs `body` on a thread of its own; `true` if it returned within `timeout`. A body that
    /// deadlocks stays blocked on its thread and the test fails.
    static func returns(within timeout: Duration = .seconds(5), _ body: @escaping @Sendable () -> Void) async -> Bool {
        let done = Latch()
        startThread(named: "TmRelCaller") {
            body()
            done.countDown()
        }
        return await opens(done, within: timeout)
    }

    /// Whether `latch` opens within `timeout`, waited for off Swift concurrency's threads.
    static func opens(_ latch: Latch, within timeout: Duration = .seconds(5)) async -> Bool {
        await onNewThread { latch.wait(timeout: timeout) }
    }

    /// Whether the timer still runs calls: a call due now runs within a few seconds.
    static func stillRuns(_ timer: TimerThread) async throws -> Bool {
        let ran = Latch()
        try timer.schedule(after: .zero) { ran.countDown() }
        return await opens(ran)
    }

    @Test("cancel() drops the closure after unlocking; a capture whose deinit cancels another call does not hang the caller")
    func cancelReleasesOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelC"))
        let other = try timer.schedule(after: .seconds(3600)) {}
        let otherCancelled = LockedValue<Bool?>(nil)
        let handle = try timer.schedule(after: .seconds(3600), Self.work { otherCancelled.value = other.cancel() })
        let result = LockedValue<Bool?>(nil)
        let returned = await Self.returns { result.value = handle.cancel() }
        #expect(returned, "cancel() deadlocked")
        guard returned else { return }
        #expect(result.value == true)
        #expect(otherCancelled.value == true)
        #expect(timer.pendingCount == 0)
        #expect(timer.dispose() == 0)
    }

    @Test("cancelAll(tag:) drops the closures after unlocking; a capture whose deinit cancels another call does not hang")
    func cancelAllReleasesOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelA"))
        let other = try timer.schedule(after: .seconds(3600)) {}
        let otherCancelled = LockedValue<Bool?>(nil)
        try timer.schedule(after: .seconds(3600), tag: "probe", Self.work { otherCancelled.value = other.cancel() })
        try timer.schedule(every: .seconds(3600), tag: "probe") {}
        let count = LockedValue<Int?>(nil)
        let returned = await Self.returns { count.value = timer.cancelAll(tag: "probe") }
        #expect(returned, "cancelAll(tag:) deadlocked")
        guard returned else { return }
        #expect(count.value == 2)
        #expect(otherCancelled.value == true)
        #expect(timer.pendingCount == 0)
        #expect(timer.dispose() == 0)
    }

    @Test("dispose() drops closures and handles after unlocking; captures whose deinit call the timer do not hang it")
    func disposeReleasesOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelD"))
        let other = try timer.schedule(after: .seconds(3600)) {}
        let calledBack = Recorder<String>()
        // One call whose handle the test keeps, one whose handle only the timer holds.
        let held = try timer.schedule(after: .seconds(3600), Self.work {
            calledBack.append("held: cancel \(other.cancel()), pending \(timer.pendingCount)")
        })
        try timer.schedule(after: .seconds(7200), tag: "t", Self.work {
            calledBack.append("dropped: cancelAll \(timer.cancelAll(tag: "t"))")
        })
        let dropped = LockedValue<Int?>(nil)
        let returned = await Self.returns { dropped.value = timer.dispose() }
        #expect(returned, "dispose() deadlocked")
        guard returned else { return }
        #expect(dropped.value == 3)
        #expect(Set(calledBack.values) == ["held: cancel false, pending 0", "dropped: cancelAll 0"])
        #expect(held.isCancelled)
    }

    @Test("A one-shot call's closure is dropped after unlocking once it ran; the timer thread does not hang")
    func firedOneShotReleasesOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelF"))
        let other = try timer.schedule(after: .seconds(3600)) {}
        let released = Latch()
        let otherCancelled = LockedValue<Bool?>(nil)
        let ran = Counter()
        let handle = try timer.schedule(after: .zero, Self.work {
            otherCancelled.value = other.cancel()
            released.countDown()
        })
        try timer.schedule(after: .zero) { ran.increment() }
        #expect(await Self.opens(released), "the timer thread deadlocked releasing a closure that had run")
        guard released.isOpen else { return }
        #expect(otherCancelled.value == true)
        #expect(try await Self.stillRuns(timer))
        #expect(ran.value == 1)
        #expect(handle.hasFired)
        #expect(timer.dispose() == 0)
    }

    @Test("A repeating call cancelled during its run has its closure dropped after unlocking; the timer thread does not hang")
    func repeatingCancelledMidRunReleasesOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelR"))
        let other = try timer.schedule(after: .seconds(3600)) {}
        let started = Latch()
        let gate = Latch()
        let released = Latch()
        let otherCancelled = LockedValue<Bool?>(nil)
        let probe = DeinitProbe {
            otherCancelled.value = other.cancel()
            released.countDown()
        }
        let handle = try timer.schedule(every: .milliseconds(10)) {
            withExtendedLifetime(probe) {
                started.countDown()
                gate.wait(timeout: .seconds(60))
            }
        }
        _ = consume probe
        #expect(await Self.opens(started))
        #expect(handle.cancel())
        #expect(!released.isOpen)  // the closure is running: it is released when the run ends
        gate.countDown()
        #expect(await Self.opens(released), "the timer thread deadlocked releasing a cancelled repeating call")
        guard released.isOpen else { return }
        #expect(otherCancelled.value == true)
        #expect(try await Self.stillRuns(timer))
        #expect(timer.dispose() == 0)
    }

    @Test("A call's tag is dropped after unlocking once the call ran; a tag whose deinit calls the timer does not hang it")
    func tagReleasedOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelT"))
        let other = try timer.schedule(after: .seconds(3600)) {}
        let released = Latch()
        let otherCancelled = LockedValue<Bool?>(nil)
        try timer.schedule(after: .zero, tag: ProbeTag {
            otherCancelled.value = other.cancel()
            released.countDown()
        }) {}
        #expect(await Self.opens(released), "the timer thread deadlocked releasing a tag")
        guard released.isOpen else { return }
        #expect(otherCancelled.value == true)
        #expect(try await Self.stillRuns(timer))

        // The same through cancel(), whose caller would hang instead.
        let cancelledTagGone = Latch()
        let tagged = try timer.schedule(after: .seconds(3600), tag: ProbeTag {
            _ = timer.pendingCount
            cancelledTagGone.countDown()
        }) {}
        #expect(await Self.returns { _ = tagged.cancel() }, "cancel() deadlocked releasing a tag")
        #expect(cancelledTagGone.isOpen)
        #expect(timer.dispose() == 0)
    }

    @Test("A call refused by a disposed timer is dropped after unlocking")
    func refusedCallReleasedOutsideTheLock() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRelE"))
        #expect(timer.dispose() == 0)
        let pending = LockedValue<Int?>(nil)
        let threw = LockedValue<Bool>(false)
        let returned = await Self.returns {
            do {
                try timer.schedule(after: .zero, tag: ProbeTag { _ = timer.pendingCount }, Self.work {
                    pending.value = timer.pendingCount
                })
            } catch {
                threw.value = true
            }
        }
        #expect(returned, "schedule on a disposed timer deadlocked")
        #expect(threw.value)
        #expect(pending.value == 0)
    }
}
