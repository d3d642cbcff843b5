import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// A disposed dedicated thread refuses a `sync` before anything else is decided, even when
/// waiting for it would close a cycle: a refused submission fails the chain with that error.
@Suite("DedicatedThread refuses a sync first", .serialized)
struct DedicatedThreadRefusalExitTests {
    @Test("A sync onto a disposing thread that is blocked on the caller's context fails with the refusal, not a deadlock stop")
    func refusalBeforeTheCycleCheck() async {
        await #expect(processExitsWith: .success) {
            DeadlockScenario.watchdog(exitCode: EXIT_FAILURE)
            let queue = DispatchQueue(label: "DTrefA")
            let thread = DedicatedThread(name: "DTrefD")
            let holdingQueue = Latch()
            let refused = Latch()
            let outcome = LockedValue<(any Error)?>(nil)
            // The caller holds the queue, and stays inside it until its sync onto the thread is over.
            DispatchMethod.async(on: .serialQueue(queue)).execute {
                holdingQueue.countDown()
                let deadline = ContinuousClock.now + .seconds(10)
                while !ExecutionContexts.blockedThreadNames.contains("DTrefD") {
                    precondition(ContinuousClock.now < deadline, "the dedicated thread never blocked on the queue")
                    usleep(1_000)
                }
                thread.dispose()
                do {
                    try DispatchMethod.sync(on: .thread(thread)).execute {}.wait()
                } catch {
                    outcome.value = error
                }
                refused.countDown()
            }
            // The thread blocks waiting for the queue, which the caller holds.
            try! thread.execute {
                holdingQueue.wait()
                _ = try? DispatchMethod.sync(on: .serialQueue(queue)).execute {}.wait()
            }
            precondition(refused.wait(timeout: .seconds(10)), "the sync onto the disposed thread never returned")
            precondition(outcome.value as? DedicatedThreadError == .disposed(name: "DTrefD"), "got \(String(describing: outcome.value))")
            precondition(thread.awaitTermination(timeout: .seconds(10)), "the disposed thread never exited")
        }
    }
}
