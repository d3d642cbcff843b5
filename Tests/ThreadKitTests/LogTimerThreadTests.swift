import Foundation
import Testing
@testable import ThreadKit

extension LogDelegateTests {
    @Test("a record logged on a timer thread is delivered by the delivery thread: a delegate that blocks delays no timer call")
    func aTimerThreadNeverRunsTheDelegate() async throws {
        let release = Latch()
        let deliverers = Recorder<String>()
        let timer = TimerThread(name: "LogTimerRule")
        defer { _ = timer.dispose() }
        try await Self.withRecordingDelegate("timerRule", onRecord: { record in
            // Holds up delivery of the timer's record until the test has seen the next call run.
            guard record.message == "from the timer" else { return }
            deliverers.append(Thread.current.name ?? "")
            release.wait(timeout: .seconds(30))
        }) { source, delegate in
            let secondCallRan = Latch()
            try timer.schedule(after: .zero) { Log.log(source, "from the timer") }
            try timer.schedule(after: .milliseconds(1)) { secondCallRan.countDown() }
            // The first record reaches the delegate, which now blocks: on the delivery thread,
            // never on the timer thread, whose next call runs meanwhile.
            #expect(await eventually(timeout: .seconds(10)) { delegate.records.count == 1 })
            let ran = secondCallRan.wait(timeout: .seconds(5))
            release.countDown()
            #expect(ran, "the timer's next call waited for the delegate")
            #expect(deliverers.values == [LogDelivery.Limits.standard.workerName])
            #expect(delegate.records.first?.threadName == "LogTimerRule")
        }
    }
}

extension LogDelegateTests {
    @Test("a record logged on a module thread (a Redis connection thread) is delivered by the delivery thread: a delegate that blocks holds up nothing it owes")
    func aModuleThreadNeverRunsTheDelegate() async throws {
        let release = Latch()
        let deliverers = Recorder<String>()
        try await Self.withRecordingDelegate("moduleThreadRule", onRecord: { record in
            guard record.message == "from the module thread" else { return }
            deliverers.append(Thread.current.name ?? "")
            release.wait(timeout: .seconds(30))
        }) { source, delegate in
            let wentOn = Latch()
            try ModuleThreads.start(name: "LogModuleRule", kernelName: "LogModuleRule") {
                Log.log(source, "from the module thread")
                wentOn.countDown()
            }
            #expect(await eventually(timeout: .seconds(10)) { delegate.records.count == 1 })
            let ran = wentOn.wait(timeout: .seconds(5))
            release.countDown()
            #expect(ran, "the module thread waited for the delegate")
            #expect(deliverers.values == [LogDelivery.Limits.standard.workerName])
            #expect(delegate.records.first?.threadName == "LogModuleRule")
        }
    }
}
