import Foundation
import Testing
@_spi(ThreadKitTools) @testable import ThreadKit

/// A queue made without an `interval`: zero gap with a `limit` (the limit alone decides), 500 ms
/// without one (the original's default).
@Suite("ThrottledQueue's default interval", .serialized, .timeLimit(.minutes(1)))
struct ThrottledQueueDefaultIntervalTests {
    @Test("Without an interval the gap is zero with a limit and 500 ms without one; a given interval is kept either way")
    func defaultIntervalRule() {
        let limit = RateLimit.rate(5, per: .seconds(1))
        #expect(ThrottledQueue.defaultInterval(limit: limit) == .zero)
        #expect(ThrottledQueue.defaultInterval(limit: nil) == .milliseconds(500))

        #expect(ThrottledQueue(label: "TQ default, limit", limit: limit).interval == .zero)
        #expect(ThrottledQueue(label: "TQ default, no limit").interval == .milliseconds(500))
        #expect(ThrottledQueue(label: "TQ given, limit", interval: .milliseconds(200), limit: limit).interval == .milliseconds(200))
        #expect(ThrottledQueue(label: "TQ given zero", interval: .zero).interval == .zero)
        #expect(ThrottledQueue(label: "TQ given, no limit", interval: .seconds(2)).interval == .seconds(2))
    }

    @Test("rate(5, per: 1 s) with no interval starts five tasks at once, well before the old default's 2 s, and the sixth a second after the first")
    func rateLimitAloneDecides() async throws {
        let queue = ThrottledQueue(label: "TQ five a second", limit: .rate(5, per: .seconds(1)))
        let starts = Recorder<Duration>()
        for _ in 0..<6 {
            try queue.async { if let start = queue.startOfCurrentTask { starts.append(start) } }
        }
        await ThrottledQueueTests.waitUntilIdle(queue)
        let recorded = starts.values
        try #require(recorded.count == 6)
        // With the old 500 ms default the fifth start came 2 s after the first; here all five
        // begin at once (a loaded machine gets a whole second of slack).
        #expect(recorded[4] - recorded[0] < .seconds(1), "starts: \(recorded.map { $0 - recorded[0] })")
        // The window: never a nanosecond early, on the instants the queue recorded.
        #expect(recorded[5] - recorded[0] >= .seconds(1), "starts: \(recorded.map { $0 - recorded[0] })")
    }

    @Test("The rate-limit example that opens Docs/ThrottledQueue.md runs every page, in order")
    func rateLimitExampleFromTheGuide() async throws {
        let pages = Recorder<Int>()
        @Sendable func fetchPage(_ page: Int) { pages.append(page) }
        // The guide's code, verbatim, in synchronous code as a reader would write it.
        let queue = try { () throws -> ThrottledQueue in
            let api = ThrottledQueue(label: "API", limit: .rate(5, per: .seconds(1)))
            for page in 1...10 {
                try api.async { fetchPage(page) }
            }
            return api
        }()
        await ThrottledQueueTests.waitUntilIdle(queue)
        #expect(pages.values == Array(1...10))
    }
}
