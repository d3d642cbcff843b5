import Foundation
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// A blocked caller's loan: it watches before it sleeps, and only the sleep is wrapped (where a
/// dedicated thread's `sync` registers its wait).
@Suite("LentWork")
struct LentWorkTests {
    /// Counts how often a loan's sleep was entered.
    private final class Sleeps: @unchecked Sendable {
        // Sendable: only the lending thread touches `count`.
        var count = 0
    }

    @Test("A loan already run when the caller starts to watch never enters its sleep")
    func answeredWhileWatchingNeverSleeps() {
        let sleeps = Sleeps()
        var ran = false
        let returned = ExecutionContexts.LentWork._blockingLend(
            { ran = true }, spinningFor: .milliseconds(10), to: { $0.run() },
            sleeping: { _, sleep in sleeps.count += 1; sleep() })
        #expect(returned && ran)
        #expect(sleeps.count == 0)
    }

    // The tests that block do so on a thread of their own (`onNewThread`), never on one of Swift
    // concurrency's few threads, which other tests' awaits need meanwhile.

    @Test("A loan run by another thread after the watch enters the sleep once, told the wait is not over, and the caller returns after it ran")
    func runLaterSleepsOnce() async throws {
        let outcome = await onNewThread { () -> (returned: Bool, sleeps: Int, overBefore: Bool?, overAfter: Bool?, ranAfter: Duration?) in
            let sleeps = Sleeps()
            var overBefore: Bool?, overAfter: Bool?
            let ranAt = LockedValue<MonotonicInstant?>(nil)
            let started = MonotonicInstant.now()
            let returned = ExecutionContexts.LentWork._blockingLend(
                { ranAt.withLock { $0 = .now() } }, spinningFor: .microseconds(20),
                to: { lent in
                    // Long after the 20 µs watch, even on a loaded machine.
                    Thread {
                        Thread.sleep(forTimeInterval: 0.5)
                        lent.run()
                    }.start()
                },
                sleeping: { isOver, sleep in
                    sleeps.count += 1
                    overBefore = isOver()
                    sleep()
                    overAfter = isOver()
                })
            return (returned, sleeps.count, overBefore, overAfter, ranAt.withLock { $0 }.map { started.duration(to: $0) })
        }
        let ranAfter = try #require(outcome.ranAfter)
        #expect(outcome.overBefore == false && outcome.overAfter == true)
        #expect(outcome.returned)
        #expect(outcome.sleeps == 1)
        #expect(ranAfter >= .milliseconds(500))
    }

    @Test("A loan let go of unrun on another thread ends the caller's sleep with false")
    func droppedLoanEndsTheSleep() async {
        let outcome = await onNewThread { () -> (returned: Bool, ran: Bool, sleeps: Int) in
            let sleeps = Sleeps()
            var ran = false
            let returned = ExecutionContexts.LentWork._blockingLend(
                { ran = true }, spinningFor: .microseconds(20),
                to: { lent in
                    let holder = LockedValue<ExecutionContexts.LentWork?>(lent)
                    Thread {
                        Thread.sleep(forTimeInterval: 0.5)
                        holder.withLock { $0 = nil }
                    }.start()
                },
                sleeping: { _, sleep in sleeps.count += 1; sleep() })
            return (returned, ran, sleeps.count)
        }
        #expect(!outcome.returned && !outcome.ran)
        #expect(outcome.sleeps == 1)
    }

    @Test("A wait whose work has run already is not registered for deadlock detection; one still waiting is")
    func waitThatIsOverIsNotRegistered() async throws {
        let holder = DedicatedThread(name: "LWreg"), other = DedicatedThread(name: "LWother")
        defer {
            holder.dispose()
            other.dispose()
        }
        let waitedFor = SerialContext(.thread(other.core))
        // On a dedicated thread, which holds its own context: its waits take part in detection.
        let seen = try await holder.run { () -> (over: Bool, waiting: Bool) in
            let over = ExecutionContexts.blocking(for: waitedFor, isOver: { true }) {
                ExecutionContexts.blockedThreadNames.contains("LWreg")
            }
            let waiting = ExecutionContexts.blocking(for: waitedFor, isOver: { false }) {
                ExecutionContexts.blockedThreadNames.contains("LWreg")
            }
            return (over, waiting)
        }
        #expect(!seen.over)
        #expect(seen.waiting)
        #expect(!ExecutionContexts.blockedThreadNames.contains("LWreg"))
    }

    /// Holds a loan weakly, to see who keeps it alive.
    private final class Watch: @unchecked Sendable {
        // Sendable: written by the borrower before `dropped` counts down, read after it.
        weak var loan: ExecutionContexts.LentWork?
    }

    @Test("A lender whose borrower runs every loan keeps the loan until its wait ends, so that it is freed where it was made; otherwise the borrower's is the last reference", arguments: [true, false])
    func lenderKeepsTheLoan(_ runsEveryLoan: Bool) async {
        let outcome = await onNewThread { () -> (returned: Bool, aliveAfterBorrowerDropped: Bool?, goneAtLast: Bool) in
            let watch = Watch()
            let dropped = Latch()
            var aliveAfterBorrowerDropped: Bool?
            let returned = ExecutionContexts.LentWork._blockingLend(
                {}, runsEveryLoan: runsEveryLoan,
                to: { lent in
                    watch.loan = lent
                    Thread { [lent] in
                        lent.run()
                        dropped.countDown()  // the thread's reference ends with this closure
                    }.start()
                },
                sleeping: { _, sleep in
                    sleep()
                    _ = dropped.wait(timeout: .seconds(10))
                    // The borrower's closure may still be being released: give it a moment.
                    let deadline = MonotonicInstant.now().advanced(by: .seconds(2))
                    while watch.loan != nil, !runsEveryLoan, MonotonicInstant.now() < deadline { Thread.sleep(forTimeInterval: 0.001) }
                    aliveAfterBorrowerDropped = watch.loan != nil
                })
            // Gone once both let go (the borrower's thread may still be ending).
            let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
            while watch.loan != nil, MonotonicInstant.now() < deadline { Thread.sleep(forTimeInterval: 0.001) }
            return (returned, aliveAfterBorrowerDropped, watch.loan == nil)
        }
        #expect(outcome.returned)
        #expect(outcome.aliveAfterBorrowerDropped == runsEveryLoan)
        #expect(outcome.goneAtLast)
    }
}
