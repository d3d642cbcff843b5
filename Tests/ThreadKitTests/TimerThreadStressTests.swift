import Foundation
import Testing
@testable import ThreadKit
import SeededRandom

/// Races between firing and cancelling, and heaps far larger than any test needs. One test at a
/// time: each keeps both cores busy.
@Suite(.serialized) struct TimerThreadStressTests {
    @Test("20,000 one-shot calls raced by cancellers: each runs or one cancel returns true, never both or neither",
          arguments: [1, 2, 4, 8])
    func exactlyOnceUnderCancelRaces(cancellers: Int) async throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmRace"))
        defer { timer.dispose() }
        let calls = 20_000
        let runs = AtomicCounters(count: calls)
        let cancels = AtomicCounters(count: calls)
        let origin = MonotonicInstant.now()
        /// The calls scheduled so far, and their indices by the millisecond (since `origin`) they fall due in.
        struct Published {
            var handles: [TimerHandle] = []
            var dueIn: [Int: [Int]] = [:]
        }
        let published = LockedValue(Published())
        let producerDone = Counter()
        let cancellersDone = Counter()

        // One thread schedules the calls, with delays of 0–20 ms, over about half a second…
        startThread(named: "TmRaceProduce") {
            var random = SplitMix64(seed: UInt64(cancellers))
            published.withLock { $0.handles.reserveCapacity(calls) }
            for index in 0..<calls {
                let delay = Duration.microseconds(Int.random(in: 0...20_000, using: &random))
                let due = origin.duration(to: .now()) + delay
                guard let handle = try? timer.schedule(after: delay, { runs.increment(index) }) else { return }
                let millisecond = Int(due / .milliseconds(1))
                published.withLock {
                    $0.handles.append(handle)
                    $0.dueIn[millisecond, default: []].append(index)
                }
                if index % 40 == 39 { usleep(1_000) }
            }
            producerDone.increment()
        }
        // …while the cancellers cancel random calls: mostly ones falling due about now, so that
        // cancels and runs collide, and some of any age. Several cancellers often pick one call at once.
        for number in 0..<cancellers {
            startThread(named: "TmRaceCancel\(number)") {
                var random = SplitMix64(seed: UInt64(1_000 + 10 * cancellers + number))
                var lastChance: MonotonicInstant?
                while lastChance.map({ MonotonicInstant.now() < $0 }) ?? true {
                    if lastChance == nil, producerDone.value == 1 {
                        lastChance = MonotonicInstant.now().advanced(by: .milliseconds(25))
                    }
                    let nearNow = Int.random(in: 0..<4, using: &random) > 0
                    let picked: (handle: TimerHandle, index: Int)? = published.withLock { published in
                        if nearNow {
                            let now = Int(origin.duration(to: .now()) / .milliseconds(1))
                            guard let due = published.dueIn[now + Int.random(in: -1...1, using: &random)],
                                  let index = due.randomElement(using: &random) else { return nil }
                            return (published.handles[index], index)
                        }
                        guard !published.handles.isEmpty else { return nil }
                        let index = Int.random(in: 0..<published.handles.count, using: &random)
                        return (published.handles[index], index)
                    }
                    if let picked, picked.handle.cancel() { cancels.increment(picked.index) }
                    usleep(UInt32.random(in: 0...50, using: &random))
                }
                cancellersDone.increment()
            }
        }
        #expect(await eventually(timeout: .seconds(60)) {
            producerDone.value == 1 && cancellersDone.value == cancellers
        })

        // Quiescence: every call's deadline has passed; a sentinel due after all of them has run.
        let sentinel = Counter()
        try timer.schedule(after: .milliseconds(30)) { sentinel.increment() }
        #expect(await eventually(timeout: .seconds(30)) { sentinel.value == 1 })
        #expect(timer.pendingCount == 0)

        let ran = runs.values
        let cancelled = cancels.values
        var neither = 0, both = 0, twice = 0
        for index in 0..<calls {
            if ran[index] + cancelled[index] == 0 { neither += 1 }
            if ran[index] > 0 && cancelled[index] > 0 { both += 1 }
            if ran[index] > 1 || cancelled[index] > 1 { twice += 1 }
        }
        #expect(neither == 0)
        #expect(both == 0)
        #expect(twice == 0)
        #expect(ran.reduce(0, +) + cancelled.reduce(0, +) == calls)
        // The handles agree with what happened.
        let all = published.withLock { $0.handles }
        #expect(all.count == calls)
        var mismatches = 0
        for (index, handle) in all.enumerated()
        where handle.isCancelled != (cancelled[index] == 1) || handle.hasFired != (ran[index] == 1) {
            mismatches += 1
        }
        #expect(mismatches == 0)
        // Both outcomes occurred, so the race was real.
        #expect(ran.contains(1))
        #expect(cancelled.contains(1))
    }

    @Test("300,000 pending calls are cheap to hold and to cancel in random order")
    func manyPendingCallsCancelledInRandomOrder() throws {
        let timer = TimerThread(name: KernelThreads.uniqueName("TmMany"))
        defer { timer.dispose() }
        let count = 300_000
        let ran = Counter()
        var random = SplitMix64(seed: 300)
        let clock = ContinuousClock()
        let start = clock.now

        var handles: [TimerHandle] = []
        handles.reserveCapacity(count)
        for _ in 0..<count {
            let delay = Duration.seconds(3600) + .milliseconds(Int.random(in: 0..<3_600_000, using: &random))
            handles.append(try timer.schedule(after: delay) { ran.increment() })
        }
        #expect(timer.pendingCount == count)
        handles.shuffle(using: &random)

        var refused = 0
        for (offset, handle) in handles.enumerated() {
            if !handle.cancel() { refused += 1 }
            if offset == count / 2 - 1 { #expect(timer.pendingCount == count / 2) }
        }
        let elapsed = clock.now - start
        #expect(refused == 0)
        #expect(timer.pendingCount == 0)
        #expect(ran.value == 0)
        // O(log n) each: a second or two; a linear search per cancel would take minutes.
        #expect(elapsed < .seconds(20), "took \(elapsed)")
        // A sample of the handles: cancelled, never fired, and a second cancel is refused.
        let sample = handles.shuffled(using: &random).prefix(2_000)
        #expect(sample.allSatisfy { $0.isCancelled && !$0.hasFired })
        #expect(!sample.contains { $0.cancel() })
        #expect(timer.dispose() == 0)
    }
}
