import Foundation
import Testing
import ThreadKitTestSupport
@testable import ThreadKit

/// A deadlock the serial contexts' detector cannot see (a pool of two threads is no serial
/// context): the wait-for graph of a snapshot finds it.
@Suite(.exitTestOnOwnThreads) struct ThreadPoolDiagnosticsExitTests {
    /// The child's exit code when its snapshot found the cycle it expected.
    static let foundTheCycle: Int32 = 42

    @Test func twoTasksWaitingForEachOtherAreADeadlockInTheDump() async {
        // Any failing exit is observed, so that a wrong one shows what the child saw.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardOutputContent, \.standardErrorContent]) {
            ThreadPoolDiagnosticsExitTests.crossWaitingTasks()
        }
        let dump = result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } ?? ""
        #expect(result?.exitStatus == .exitCode(Self.foundTheCycle), "stdout: \(dump)\nstderr: \(standardError(of: result) ?? "")")
        #expect(dump.contains("Found one ThreadKit-level deadlock:"))
        #expect(dump.contains("\"crossed Thread1\""))
        #expect(dump.contains("waits"))
        #expect(dump.contains("in wait for a task of ThreadPool \"crossed\" \"second\", held by \"crossed Thread2\""))
        #expect(dump.contains("in wait for a task of ThreadPool \"crossed\" \"first\", held by \"crossed Thread1\""))
    }

    /// In the child: each of a two-thread pool's two running tasks waits for the other; the dump
    /// goes to standard output, and the exit code says whether the cycle was as expected.
    static func crossWaitingTasks() {
        let pool = ThreadPool(name: "crossed", size: 2)
        let tasks = LockedValue<[ScheduledTask]>([])
        let handlesReady = Latch()
        let bothInside = Latch(count: 2)
        @Sendable func other(than index: Int) -> ScheduledTask {
            handlesReady.wait()
            return tasks.withLock { $0[1 - index] }
        }
        let first = try! pool.schedule(label: "first") {
            bothInside.countDown()
            bothInside.wait()
            other(than: 0).wait()
        }
        let second = try! pool.schedule(label: "second") {
            bothInside.countDown()
            bothInside.wait()
            other(than: 1).wait()
        }
        tasks.withLock { $0 = [first, second] }
        handlesReady.countDown()
        let deadline = ContinuousClock.now + .seconds(10)
        var snapshot = Diagnostics.snapshot()
        while snapshot.cycles.isEmpty, ContinuousClock.now < deadline {
            usleep(5_000)
            snapshot = Diagnostics.snapshot()
        }
        FileHandle.standardOutput.write(Data(snapshot.description.utf8))
        let workers = snapshot.components.first { $0.name == "crossed" }?.threads.map(\.kernelThreadID) ?? []
        guard snapshot.cycles.count == 1, let cycle = snapshot.cycles.first, cycle.count == 2,
              cycle.allSatisfy({ $0.kind == "wait" }),
              Set(cycle.map(\.thread.kernelThreadID)) == Set(workers), workers.count == 2,
              Set(cycle.compactMap(\.holder?.kernelThreadID)) == Set(workers)
        else { exit(1) }
        exit(Self.foundTheCycle)
    }
}
