import Testing
@testable import ThreadKit

/// How the local fallback scales a shared limit: exact rate, bursts rounded down.
@Suite("UnavailablePolicy")
struct UnavailablePolicyTests {
    @Test("The gap is divided by the share, rounded up")
    func gapScaled() {
        #expect(UnavailablePolicy.fallbackRules(gap: 100_000, limit: nil, share: 0.5).gap == 200_000)
        #expect(UnavailablePolicy.fallbackRules(gap: 100, limit: nil, share: 0.3).gap == 334)
        #expect(UnavailablePolicy.fallbackRules(gap: 0, limit: nil, share: 0.5).gap == 0)
        #expect(UnavailablePolicy.fallbackRules(gap: .max, limit: nil, share: 0.5).gap == .max)
    }

    @Test("N per W becomes ⌊N × share⌋ (at least 1) per a window that keeps the rate exactly share × N / W",
          arguments: [(5, 0.5, 2, 800_000), (1, 0.5, 1, 2_000_000), (10, 1.0, 10, 1_000_000), (3, 0.25, 1, 1_333_334), (100, 0.33, 33, 1_000_000)])
    func limitScaled(count: Int, share: Double, scaledCount: Int, scaledWindow: Int64) {
        let rules = UnavailablePolicy.fallbackRules(gap: 0, limit: (count, 1_000_000), share: share)
        #expect(rules.limit?.count == scaledCount)
        #expect(rules.limit?.window == scaledWindow)
        // Never faster than the share of the rate.
        let rate = Double(rules.limit!.count) / Double(rules.limit!.window)
        #expect(rate <= share * Double(count) / 1_000_000 * (1 + 1e-12))
    }
}
