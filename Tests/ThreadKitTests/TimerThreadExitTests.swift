import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a precondition failure.
@Suite struct TimerThreadExitTests {
    @Test("a negative delay stops the process")
    func negativeDelay() async {
        await #expect(processExitsWith: .failure) {
            let timer = TimerThread(name: "TmExitNeg")
            _ = try? timer.schedule(after: .milliseconds(-1)) {}
        }
    }

    @Test("a NaN delay stops the process")
    func nanDelay() async {
        await #expect(processExitsWith: .failure) {
            let timer = TimerThread(name: "TmExitNaN")
            _ = try? timer.schedule(after: .seconds(Double.nan)) {}
        }
    }

    @Test("a zero interval stops the process")
    func zeroInterval() async {
        await #expect(processExitsWith: .failure) {
            let timer = TimerThread(name: "TmExitZero")
            _ = try? timer.schedule(every: .zero) {}
        }
    }

    @Test("a negative interval stops the process")
    func negativeInterval() async {
        await #expect(processExitsWith: .failure) {
            let timer = TimerThread(name: "TmExitNegI")
            _ = try? timer.schedule(every: .seconds(-1)) {}
        }
    }

    @Test("disposing the shared timer stops the process")
    func disposeShared() async {
        await #expect(processExitsWith: .failure) {
            _ = TimerThread.shared.dispose()
        }
    }

    @Test("an element cannot be in a timer heap twice")
    func heapInsertTwice() async {
        await #expect(processExitsWith: .failure) {
            final class Item: TimerHeapElement { var heapIndex: Int? }
            var heap = TimerHeap<Item>()
            let item = Item()
            heap.insert(item, deadline: MonotonicInstant(nanoseconds: 1))
            heap.insert(item, deadline: MonotonicInstant(nanoseconds: 2))
        }
    }

    @Test("the exit tests' bodies do not stop the process when the input is fine")
    func validInputExitsCleanly() async {
        await #expect(processExitsWith: .success) {
            let timer = TimerThread(name: "TmExitOK")
            _ = try? timer.schedule(after: .zero) {}
            _ = try? timer.schedule(every: .nanoseconds(1)) {}
            _ = try? timer.schedule(at: .now - .seconds(1)) {}
            precondition(timer.dispose() <= 3)
        }
    }
}
