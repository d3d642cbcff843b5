import Dispatch
import Foundation
import Testing
@testable import ThreadKit

/// A disposed dedicated thread refuses a `sync` before anything else is decided, even when
/// waiting for it would close a cycle: a refused submission fails the chain with that error.
@Suite("DedicatedThread refuses a sync first", .serialized)
struct DedicatedThreadRefusalExitTests {
    @Test("A sync onto a disposing thread that is blocked on the caller's context fails with the refusal, not a deadlock stop", .exitTestOnOwnThreads)
    func refusalBeforeTheCycleCheck() async {
        await #expect(processExitsWith: .success) { Self.syncOntoADisposingThreadBlockedOnTheCaller() }
    }

    /// The caller holds serial queue `DTrefA` and, inside it, syncs onto `DTrefD` once that
    /// thread is disposing and blocked waiting for `DTrefA`: it gets the thread's refusal, and
    /// both waits end. A stop, a hang (the watchdog) or another outcome fails.
    static func syncOntoADisposingThreadBlockedOnTheCaller() {
        DeadlockScenario.watchdog(exitCode: EXIT_FAILURE)
        let holder = DispatchQueue(label: "DTrefA")
        let disposing = DedicatedThread(name: "DTrefD")
        let insideHolder = Latch()
        let syncReturned = Latch()
        let refusal = LockedValue<(any Error)?>(nil)
        DispatchMethod.async(on: .serialQueue(holder)).execute {
            insideHolder.countDown()
            let deadline = ContinuousClock.now + .seconds(10)
            while !ExecutionContexts.blockedThreadNames.contains("DTrefD") {
                precondition(ContinuousClock.now < deadline, "the dedicated thread never blocked on the queue")
                usleep(1_000)
            }
            disposing.dispose()
            do {
                try DispatchMethod.sync(on: .thread(disposing)).execute {}.wait()
            } catch {
                refusal.value = error
            }
            syncReturned.countDown()
        }
        try! disposing.execute {
            insideHolder.wait()
            _ = try? DispatchMethod.sync(on: .serialQueue(holder)).execute {}.wait()
        }
        precondition(syncReturned.wait(timeout: .seconds(10)), "the sync onto the disposed thread never returned")
        precondition(refusal.value as? DedicatedThreadError == .disposed(name: "DTrefD"), "got \(String(describing: refusal.value))")
        precondition(disposing.awaitTermination(timeout: .seconds(10)), "the disposed thread never exited")
    }
}
