import Testing
@testable import ThreadKit

/// Programmer errors stop the process with a precondition failure whose message names the timer,
/// the argument and the value.
@Suite(.serialized) struct TimerThreadExitTests {
    /// A call that breaks one of the timer's preconditions, and what the message it stops with says.
    enum BadCall: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
        case negativeDelay = "a negative delay stops the process"
        case nanDelay = "a NaN delay stops the process"
        case zeroInterval = "a zero interval stops the process"
        case negativeInterval = "a negative interval stops the process"
        case negativeIntervalFixedDelay = "a negative interval stops the process, with a fixed delay too"
        case negativeFirstDelay = "a negative first delay stops the process"
        case negativeFirstDelayFixedDelay = "a negative first delay stops the process, with a fixed delay too"
        case disposeShared = "disposing the shared timer stops the process"
        case heapInsertTwice = "an element cannot be in a timer heap twice"

        var testDescription: String { rawValue }

        /// What the message names: the timer, the argument and its value (nothing checked where empty).
        var message: [String] {
            switch self {
            case .negativeDelay: ["TimerThread 'TmExitNeg'", "delay must not be negative, got -0.001 seconds"]
            case .zeroInterval: ["TimerThread 'TmExitZero'", "interval must be more than zero, got 0.0 seconds"]
            case .negativeInterval: ["TimerThread 'TmExitNegI'", "interval must be more than zero, got -1.0 seconds"]
            case .negativeIntervalFixedDelay: ["TimerThread 'TmExitNegD'", "interval must be more than zero, got -0.005 seconds"]
            case .negativeFirstDelay: ["TimerThread 'TmExitFirst'", "firstDelay must not be negative, got -0.001 seconds"]
            case .negativeFirstDelayFixedDelay: ["TimerThread 'TmExitFirstD'", "firstDelay must not be negative, got -2.0 seconds"]
            case .nanDelay, .disposeShared, .heapInsertTwice: []
            }
        }

        /// Makes the call; it does not return.
        func perform() {
            switch self {
            case .negativeDelay:
                _ = try? TimerThread(name: "TmExitNeg").schedule(after: .milliseconds(-1)) {}
            case .nanDelay:
                _ = try? TimerThread(name: "TmExitNaN").schedule(after: .seconds(Double.nan)) {}
            case .zeroInterval:
                _ = try? TimerThread(name: "TmExitZero").schedule(every: .zero) {}
            case .negativeInterval:
                _ = try? TimerThread(name: "TmExitNegI").schedule(every: .seconds(-1)) {}
            case .negativeIntervalFixedDelay:
                _ = try? TimerThread(name: "TmExitNegD").schedule(every: .milliseconds(-5), startingAfter: .zero, spacing: .fixedDelay) {}
            case .negativeFirstDelay:
                _ = try? TimerThread(name: "TmExitFirst").schedule(every: .seconds(1), startingAfter: .milliseconds(-1)) {}
            case .negativeFirstDelayFixedDelay:
                _ = try? TimerThread(name: "TmExitFirstD").schedule(every: .seconds(1), startingAfter: .seconds(-2), spacing: .fixedDelay) {}
            case .disposeShared:
                _ = TimerThread.shared.dispose()
            case .heapInsertTwice:
                final class Item: TimerHeapElement { var heapIndex: Int? }
                var heap = TimerHeap<Item>()
                let item = Item()
                heap.insert(item, deadline: MonotonicInstant(nanoseconds: 1))
                heap.insert(item, deadline: MonotonicInstant(nanoseconds: 2))
            }
        }
    }

    @Test("A bad call stops the process with a message naming the timer, the argument and its value", arguments: BadCall.allCases)
    func stops(_ call: BadCall) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [call] in
            call.perform()
        }
        #expect(stopped(result, saying: call.message))
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
