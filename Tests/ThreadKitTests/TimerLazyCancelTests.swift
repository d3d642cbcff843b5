import Foundation
import Testing
@testable import ThreadKit
import SeededRandom

/// Issue 23, item 3: a cancel takes no lock. It moves the handle's atomic state (the pure
/// `TimerCallState`) and leaves a dead entry in the heap, which the timer thread drops at the top
/// and a sweep drops once dead entries are more than half the heap.
@Suite struct TimerLazyCancelTests {
    // MARK: - The call's state, with no threads

    @Test("a call's states: only a scheduled call starts; a run ends as fired (one-shot) or scheduled (repeating)")
    func startAndFinish() {
        let scheduled = TimerCallState.scheduled
        #expect(scheduled.phase == .scheduled && !scheduled.hasRun)
        let running = scheduled.started()
        #expect(running == TimerCallState(.running, hasRun: true))
        #expect(running?.finished(repeating: false) == TimerCallState(.fired, hasRun: true))
        #expect(running?.finished(repeating: true) == TimerCallState(.scheduled, hasRun: true))
        // A repeating call waiting for its next run has run before, and starts again.
        #expect(TimerCallState(.scheduled, hasRun: true).started() == TimerCallState(.running, hasRun: true))
        for phase in [TimerCallState.Phase.running, .fired, .cancelled] {
            for hasRun in [false, true] {
                #expect(TimerCallState(phase, hasRun: hasRun).started() == nil, "\(phase) must not start")
            }
        }
        for phase in [TimerCallState.Phase.scheduled, .fired, .cancelled] {
            for repeating in [false, true] {
                #expect(TimerCallState(phase, hasRun: true).finished(repeating: repeating) == nil, "\(phase) is not running")
            }
        }
    }

    @Test("a cancel stops a scheduled call, or a repeating call during its run; never a one-shot call once it started")
    func cancelTransitions() {
        for repeating in [false, true] {
            #expect(TimerCallState.scheduled.cancelled(repeating: repeating) == TimerCallState(.cancelled, hasRun: false))
            #expect(TimerCallState(.fired, hasRun: true).cancelled(repeating: repeating) == nil)
            #expect(TimerCallState(.cancelled, hasRun: false).cancelled(repeating: repeating) == nil)
            #expect(TimerCallState(.cancelled, hasRun: true).cancelled(repeating: repeating) == nil)
        }
        // A repeating call between runs keeps "has run".
        #expect(TimerCallState(.scheduled, hasRun: true).cancelled(repeating: true) == TimerCallState(.cancelled, hasRun: true))
        #expect(TimerCallState(.running, hasRun: true).cancelled(repeating: false) == nil)
        #expect(TimerCallState(.running, hasRun: true).cancelled(repeating: true) == TimerCallState(.cancelled, hasRun: true))
        // Every state reads back from its byte.
        for phase in [TimerCallState.Phase.scheduled, .running, .fired, .cancelled] {
            for hasRun in [false, true] {
                let state = TimerCallState(phase, hasRun: hasRun)
                #expect(TimerCallState(rawValue: state.rawValue) == state)
                #expect(state.phase == phase && state.hasRun == hasRun)
            }
        }
    }

    // MARK: - Real threads

    @Test("cancelling most of 20,000 pending calls keeps the heap within twice the live calls plus one, and sweeps it")
    func cancelledEntriesStayBounded() throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmSweep"))
        defer { timer.dispose() }
        let count = 20_000
        var random = SplitMix64(seed: 23)
        var handles: [TimerHandle] = []
        for _ in 0..<count {
            handles.append(try timer.schedule(after: .seconds(3_600) + .milliseconds(Int.random(in: 0..<60_000, using: &random))) {})
        }
        handles.shuffle(using: &random)
        var worst = 0, shrunk = false
        for (offset, handle) in handles.enumerated() where offset < count - 100 {
            #expect(handle.cancel())
            let stored = timer.core.storedEntryCount, live = count - offset - 1
            if stored > 2 * live + 1 { worst = max(worst, stored - (2 * live + 1)) }
            if stored < count { shrunk = true }
        }
        #expect(worst == 0, "the heap stored up to \(worst) entries beyond twice the live calls plus one")
        #expect(shrunk, "no sweep ran")
        #expect(timer.pendingCount == 100)
        #expect(timer.core.storedEntryCount <= 201)
        #expect(timer.dispose() == 100)
    }

    @Test("a dead entry at the top neither runs nor delays the call after it", .timeLimit(.minutes(1)))
    func deadEntryAtTheTopIsDropped() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmTop"))
        defer { timer.dispose() }
        let ran = Recorder<Int>()
        let first = try timer.schedule(after: .milliseconds(100)) { ran.append(1) }
        let scheduled = MonotonicInstant.now()
        try timer.schedule(after: .milliseconds(300)) { ran.append(2) }
        #expect(first.cancel())
        #expect(timer.pendingCount == 1)
        #expect(await eventually(timeout: .seconds(5)) { ran.count == 1 })
        #expect(MonotonicInstant.now() >= scheduled.advanced(by: .milliseconds(300)))
        #expect(ran.values == [2])
        #expect(timer.pendingCount == 0)
        #expect(timer.core.storedEntryCount == 0)
    }

    @Test("eight threads cancel one handle at once: exactly one cancel returns true", arguments: [false, true])
    func oneCancelWinsARace(repeating: Bool) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmWin"))
        defer { timer.dispose() }
        let ran = Counter()
        for round in 0..<200 {
            let handle = repeating
                ? try timer.schedule(every: .seconds(3_600)) { ran.increment() }
                : try timer.schedule(after: .seconds(3_600)) { ran.increment() }
            let wins = Counter()
            await onThreads(8) { _ in
                if handle.cancel() { wins.increment() }
            }
            #expect(wins.value == 1, "round \(round): \(wins.value) cancels returned true")
            #expect(handle.isCancelled && !handle.hasFired)
        }
        #expect(ran.value == 0)
        #expect(timer.pendingCount == 0)
    }

    @Test("2,000 calls due at one instant, cancelled while they fire: each ran once or its cancel returned true, never both, never neither",
          .timeLimit(.minutes(1)))
    func cancelRacesCallsDueTogether() async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmTogether"))
        defer { timer.dispose() }
        let calls = 2_000
        let runs = AtomicCounters(count: calls)
        let cancels = AtomicCounters(count: calls)
        let due = ContinuousClock.now + .milliseconds(50)
        var handles: [TimerHandle] = []
        for index in 0..<calls {
            handles.append(try timer.schedule(at: due) {
                runs.increment(index)
                spin(for: .microseconds(2))
            })
        }
        let published = handles
        // Two cancellers from the back and the middle, meeting the timer thread as it works through.
        await onThreads(2) { number in
            while ContinuousClock.now < due {}
            let backwards: [Int] = (0..<calls).reversed()
            let fromTheMiddle: [Int] = Array(calls / 2..<calls) + Array(0..<calls / 2)
            let order = number == 0 ? backwards : fromTheMiddle
            for index in order where published[index].cancel() { cancels.increment(index) }
        }
        #expect(await eventually(timeout: .seconds(10)) { timer.pendingCount == 0 })
        let sentinel = Counter()
        try timer.schedule(after: .zero) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(10)) { sentinel.value == 1 })
        let wrong = (0..<calls).filter { runs[$0] + cancels[$0] != 1 }
        #expect(wrong.isEmpty, "calls run or cancelled other than once: \(wrong.prefix(10))")
        #expect(handles.allSatisfy { $0.isCancelled != $0.hasFired })
        #expect(timer.core.storedEntryCount == 0)
    }

    @Test("cancels by handle count in the timer's cancelled calls at once, with the dead entries still in the heap")
    func cancelsCountAtOnce() throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmCount"))
        defer { timer.dispose() }
        let handles = try (0..<10).map { _ in try timer.schedule(after: .seconds(3_600)) {} }
        // The latest four: the thread drops dead entries when they reach the top, and these never do.
        for handle in handles.suffix(4) { #expect(handle.cancel()) }
        let reading = timer.core.diagnosticsReading(next: 10)
        #expect(reading.metrics.cancelled == 4)
        #expect(reading.pending == 6)
        #expect(reading.next.count == 6)
        #expect(timer.core.storedEntryCount == 10)
    }
}

/// Busy-waits for `duration`.
private func spin(for duration: Duration) {
    let end = ContinuousClock.now + duration
    while ContinuousClock.now < end {}
}
