import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import ThreadKitURL

/// Programmer errors stop the process with a message that names the argument and the value.
@Suite("URLDispatcher preconditions")
struct URLDispatcherExitTests {
    @Test func aLongLimitNotBelowTheTotalStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = URLDispatcher.EndpointLimits(maxRequests: 3, maxLongRequests: 3)
        }
        #expect(stopped(result, saying: "maxLongRequests (3) must be less than maxRequests (3)"))
    }

    @Test func noRequestsAtAllStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = URLDispatcher.EndpointLimits(maxRequests: 0, maxLongRequests: 0)
        }
        #expect(stopped(result, saying: "maxRequests must be at least 1, got 0"))
    }

    @Test func anExplicitLongLimitAboveTheTotalStopsNamingBoth() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = URLDispatcher.EndpointLimits(maxRequests: 1, maxLongRequests: 2)
        }
        #expect(stopped(result, saying: "maxLongRequests (2) must be less than maxRequests (1)"))
    }

    @Test func limitsMadeInvalidThroughTheirPropertiesStopWhereTheyAreHandedOver() async {
        let atInit = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var limits = URLDispatcher.EndpointLimits()
            limits.maxRequests = 3   // the long limit stays 3
            _ = URLDispatcher(limits: limits)
        }
        #expect(stopped(atInit, saying: "maxLongRequests (3) must be less than maxRequests (3)"))
        let atSetLimits = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var limits = URLDispatcher.EndpointLimits()
            limits.maxRetryAfter = .seconds(-1)
            URLDispatcher().setLimits(limits, for: try! URLDispatcher.Endpoint(url: URL(string: "http://127.0.0.1:9/")!))
        }
        #expect(stopped(atSetLimits, saying: "maxRetryAfter must not be negative"))
    }

    @Test func aNegativeLongLimitStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = URLDispatcher.EndpointLimits(maxRequests: 4, maxLongRequests: -1)
        }
        #expect(stopped(result, saying: "maxLongRequests must be at least 0, got -1"))
    }

    /// A default never makes a valid argument trap: the long limit's default adapts to a small
    /// `maxRequests`. (Before, `maxRequests: 3` trapped on the default of 3.)
    @Test func theLongLimitsDefaultAdaptsToASmallTotal() async {
        await #expect(processExitsWith: .success) {
            for (total, long) in [(1, 0), (2, 1), (3, 2), (4, 3), (5, 3), (6, 3), (100, 3)] {
                let limits = URLDispatcher.EndpointLimits(maxRequests: total)
                precondition(limits.maxRequests == total && limits.maxLongRequests == long,
                             "maxRequests \(total) got maxLongRequests \(limits.maxLongRequests), not \(long)")
            }
            precondition(URLDispatcher.EndpointLimits().maxLongRequests == 3)
            precondition(URLDispatcher.EndpointLimits(maxRequests: 3, rate: .rate(1, per: .seconds(1))).maxLongRequests == 2)
            let dispatcher = URLDispatcher(limits: .init(maxRequests: 1))
            precondition(!dispatcher.isLongRequestAllowed(to: URL(string: "http://127.0.0.1:9/")!))
            dispatcher.dispose()
        }
    }

    @Test func aNegativeTimeoutStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let dispatcher = URLDispatcher()
            _ = dispatcher.stream(for: URLRequest(url: URL(string: "http://127.0.0.1:9/")!), timeout: .milliseconds(-5))
        }
        #expect(stopped(result, saying: "timeout must not be negative", "-0.005 seconds"))
    }
}
