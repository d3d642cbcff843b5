import Dispatch
import Testing
@testable import ThreadKit

/// `DispatchTarget.description` is public: its text stays what it has always been, whatever
/// names the deadlock messages use.
@Suite("DispatchTarget's description")
struct DispatchTargetDescriptionTests {
    @Test("Each target is named by its kind and its label in single quotes; the main and global queues by what they are")
    func descriptions() {
        let pool = ThreadPool(name: "DTpool", size: 2)
        let single = ThreadPool(name: "DTsingle", size: 1)
        let thread = DedicatedThread(name: "DTthread")
        let throttled = ThrottledQueue(label: "DTthrottled", interval: .zero)
        defer {
            pool.dispose()
            single.dispose()
            thread.dispose()
        }
        let expected: [(DispatchTarget, String)] = [
            (.main, "the main queue"),
            (.global(qos: .utility), "the global queue (utility)"),
            (.serialQueue(DispatchQueue(label: "DTserial")), "serial DispatchQueue 'DTserial'"),
            (.concurrentQueue(DispatchQueue(label: "DTconcurrent", attributes: .concurrent)), "concurrent DispatchQueue 'DTconcurrent'"),
            (.pool(pool), "ThreadPool 'DTpool'"),
            (.pool(single), "ThreadPool 'DTsingle'"),
            (.thread(thread), "DedicatedThread 'DTthread'"),
            (.throttled(throttled), "ThrottledQueue 'DTthrottled'"),
        ]
        for (target, description) in expected {
            #expect(target.description == description)
        }
    }

    @Test("A deadlock message names a serial context with its label in double quotes")
    func deadlockMessageNames() {
        let thread = DedicatedThread(name: "DTthread")
        defer { thread.dispose() }
        #expect(SerialContext(.thread(thread.core)).description == #"DedicatedThread "DTthread""#)
        #expect(SerialContext(.queue(DispatchQueue(label: "DTserial"))).description == #"DispatchQueue "DTserial""#)
        #expect(SerialContext(.main).description == "the main queue")
    }
}
