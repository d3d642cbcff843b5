import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import ThreadKitURL

/// Programmer errors stop the process with a message that names the argument and the value.
@Suite("URLDispatcher preconditions")
struct URLDispatcherExitTests {
    static func stopped(_ result: ExitTest.Result?, saying fragments: String...) -> Bool {
        guard let result else { return false }
        let message = String(decoding: result.standardErrorContent, as: UTF8.self)
        return fragments.allSatisfy { message.contains($0) }
    }

    @Test func aLongLimitNotBelowTheTotalStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = URLDispatcher.EndpointLimits(maxRequests: 3, maxLongRequests: 3)
        }
        #expect(Self.stopped(result, saying: "maxLongRequests (3) must be less than maxRequests (3)"))
    }

    @Test func noRequestsAtAllStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = URLDispatcher.EndpointLimits(maxRequests: 0, maxLongRequests: 0)
        }
        #expect(Self.stopped(result, saying: "maxRequests must be at least 1, got 0"))
    }

    @Test func aNegativeTimeoutStops() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let dispatcher = URLDispatcher()
            _ = dispatcher.stream(for: URLRequest(url: URL(string: "http://127.0.0.1:9/")!), timeout: .milliseconds(-5))
        }
        #expect(Self.stopped(result, saying: "timeout must not be negative", "-0.005 seconds"))
    }
}
