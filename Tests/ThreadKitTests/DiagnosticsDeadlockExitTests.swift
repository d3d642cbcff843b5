import Foundation
import Testing
@testable import ThreadKit
import ThreadKitTestSupport

/// The deadlock detector's report: in a process of its own, a cycle of syncs across two dedicated
/// threads stops the process, and standard error holds the detector's message and then every
/// thread ThreadKit knows, the waiting ones blocked on what they wait for.
@Suite("The deadlock detector's thread list", .serialized)
struct DiagnosticsDeadlockExitTests {
    @Test("A → B → A across two dedicated threads stops the process with the message and the threads' list", .exitTestOnOwnThreads)
    func cycleStopsWithThreadList() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            // A watchdog: a scenario that hangs exits with success, which this test does not expect.
            Thread {
                sleep(20)
                FileHandle.standardError.write(Data("watchdog: the scenario hung\n".utf8))
                exit(EXIT_SUCCESS)
            }.start()
            let first = DedicatedThread(name: "dq-cycle-A")
            let second = DedicatedThread(name: "dq-cycle-B")
            let bothInside = Latch(count: 2)
            try! first.execute {
                bothInside.countDown()
                bothInside.wait()
                second.sync {}
            }
            try! second.execute {
                bothInside.countDown()
                bothInside.wait()
                usleep(100_000)  // let the first block first
                first.sync {}
            }
            while true { sleep(60) }
        }
        #if DEBUG
        let output = standardError(of: result) ?? ""
        #expect(output.contains("ThreadKit deadlock: thread \"dq-cycle-"), "standard error was: \(output)")
        let threads = output.components(separatedBy: "Threads:\n").dropFirst().first ?? ""
        #expect(!threads.isEmpty, "standard error was: \(output)")
        let rows = threads.split(separator: "\n").map(String.init)
        let rowA = rows.first { $0.hasPrefix("  \"dq-cycle-A\"") }
        let rowB = rows.first { $0.hasPrefix("  \"dq-cycle-B\"") }
        #expect(rowA != nil && rowB != nil, "threads were: \(threads)")
        // Whichever closes the cycle is reported blocked too: it reports its wait before the
        // detector's check.
        #expect(rowA?.contains("blocked") == true, "row was: \(rowA ?? "")")
        #expect(rowA?.contains("waiting for DedicatedThread \"dq-cycle-B\"") == true, "row was: \(rowA ?? "")")
        #expect(rowB?.contains("blocked") == true, "row was: \(rowB ?? "")")
        #expect(rowB?.contains("waiting for DedicatedThread \"dq-cycle-A\"") == true, "row was: \(rowB ?? "")")
        #endif
    }
}
