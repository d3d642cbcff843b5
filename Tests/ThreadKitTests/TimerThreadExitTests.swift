import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a precondition failure whose message names the timer,
/// the argument and the value.
@Suite(.serialized) struct TimerThreadExitTests {
    @Test("a negative delay stops the process")
    func negativeDelay() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TimerThread(name: "TmExitNeg")
            _ = try? timer.schedule(after: .milliseconds(-1)) {}
        }
        #expect(stopped(result, saying: "TimerThread 'TmExitNeg'", "delay must not be negative, got -0.001 seconds"))
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
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TimerThread(name: "TmExitZero")
            _ = try? timer.schedule(every: .zero) {}
        }
        #expect(stopped(result, saying: "TimerThread 'TmExitZero'", "interval must be more than zero, got 0.0 seconds"))
    }

    @Test("a negative interval stops the process, for either spacing")
    func negativeInterval() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TimerThread(name: "TmExitNegI")
            _ = try? timer.schedule(every: .seconds(-1)) {}
        }
        #expect(stopped(result, saying: "TimerThread 'TmExitNegI'", "interval must be more than zero, got -1.0 seconds"))
        let delayed = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TimerThread(name: "TmExitNegD")
            _ = try? timer.schedule(every: .milliseconds(-5), startingAfter: .zero, spacing: .fixedDelay) {}
        }
        #expect(stopped(delayed, saying: "TimerThread 'TmExitNegD'", "interval must be more than zero, got -0.005 seconds"))
    }

    @Test("a negative first delay stops the process, for either spacing")
    func negativeFirstDelay() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TimerThread(name: "TmExitFirst")
            _ = try? timer.schedule(every: .seconds(1), startingAfter: .milliseconds(-1)) {}
        }
        #expect(stopped(result, saying: "TimerThread 'TmExitFirst'", "firstDelay must not be negative, got -0.001 seconds"))
        let delayed = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let timer = TimerThread(name: "TmExitFirstD")
            _ = try? timer.schedule(every: .seconds(1), startingAfter: .seconds(-2), spacing: .fixedDelay) {}
        }
        #expect(stopped(delayed, saying: "TimerThread 'TmExitFirstD'", "firstDelay must not be negative, got -2.0 seconds"))
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
            _ = try? timer.schedule(every: .nanoseconds(1), startingAfter: .zero, spacing: .fixedDelay) {}
            precondition(timer.dispose() <= 4)
        }
    }
}
