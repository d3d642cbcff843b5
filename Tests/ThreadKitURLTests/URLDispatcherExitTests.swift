import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import ThreadKitURL
import LoopbackHTTPServer

/// Programmer errors stop the process with a message that names the argument and the value.
///
/// A negative timeout stops at the call that hands it over (zero and far-out ones work: see
/// ``URLArgumentRulesTests``). None of these calls reaches the network: each stops first.
@Suite("URLDispatcher, LoopbackHTTPServer and HTTPRequestParser preconditions")
struct URLDispatcherExitTests {
    /// A call that breaks one of the dispatcher's preconditions, and what the message it stops with says.
    enum BadCall: String, CaseIterable, Codable, Sendable, NamedTestCase {
        case longLimitNotBelowTheTotal = "a long limit not below the total stops"
        case noRequestsAtAll = "no requests at all stops"
        case explicitLongLimitAboveTheTotal = "an explicit long limit above the total stops, naming both"
        case negativeLongLimit = "a negative long limit stops"
        case limitsMadeInvalidThroughTheirPropertiesAtInit = "limits made invalid through their properties stop where init takes them"
        case limitsMadeInvalidThroughTheirPropertiesAtSetLimits = "limits made invalid through their properties stop where setLimits takes them"
        case negativeMaxRequests = "a negative maxRequests stops"
        case minMaxRequests = "a maxRequests of Int.min stops"
        case minLongLimit = "a long limit of Int.min stops"
        case negativeMaxRetryAfterAtInit = "a negative maxRetryAfter stops where the limits are made"
        case nanTimeoutInterval = "a request whose timeoutInterval is NaN stops"
        case negativeTimeout = "data(for:timeout:) with a negative timeout stops at the call"
        case negativeQueueTimeout = "data(for:queueTimeout:) with a negative queueTimeout stops at the call"
        case negativeStreamTimeout = "stream(for:timeout:) with a negative timeout stops at the call, before any iteration"
        case negativeIdleTimeout = "stream(for:idleTimeout:) with a negative idleTimeout stops at the call, before any iteration"
        case farNegativeIdleTimeout = "stream(for:idleTimeout:) negative beyond Int64.max seconds stops at the call"
        case negativeDataSyncTimeout = "dataSync(for:timeout:) with a negative timeout stops at the call"
        case negativeTimeoutIntervalAtDispatch = "dispatch of a request whose timeoutInterval is negative stops at the call"
        case negativeTimeoutIntervalAtDataSync = "dataSync of a request whose negative timeoutInterval is its default timeout stops"
        case serverWithoutConnections = "LoopbackHTTPServer(maxConnections: 0) stops"
        case serverWithNegativeConnections = "LoopbackHTTPServer(maxConnections: -1) stops"
        case parserWithoutHeadRoom = "HTTPRequestParser(maxHeadBytes: 0) stops"
        case parserHeadBelowItsSmallest = "HTTPRequestParser(maxHeadBytes: 63), one below the smallest, stops"
        case parserHeadMin = "HTTPRequestParser(maxHeadBytes: Int.min) stops"
        case parserNegativeBody = "HTTPRequestParser(maxBodyBytes: -1) stops"
        case parserBodyMin = "HTTPRequestParser(maxBodyBytes: Int.min) stops"

        /// What the message names: the argument and its value.
        var message: [String] {
            switch self {
            case .longLimitNotBelowTheTotal: ["URLDispatcher.EndpointLimits.init: maxLongRequests must be less than maxRequests (3)", "got 3"]
            case .noRequestsAtAll: ["URLDispatcher.EndpointLimits.init: maxRequests must be at least 1, got 0"]
            case .explicitLongLimitAboveTheTotal: ["URLDispatcher.EndpointLimits.init: maxLongRequests must be less than maxRequests (1)", "got 2"]
            case .negativeLongLimit: ["URLDispatcher.EndpointLimits.init: maxLongRequests must not be negative, got -1"]
            case .limitsMadeInvalidThroughTheirPropertiesAtInit: ["URLDispatcher.init(limits:configuration:): maxLongRequests must be less than maxRequests (3)", "got 3"]
            case .limitsMadeInvalidThroughTheirPropertiesAtSetLimits: ["URLDispatcher.setLimits(_:for:): maxRetryAfter must not be negative, got -1.0 seconds"]
            case .negativeMaxRequests: ["URLDispatcher.EndpointLimits.init: maxRequests must be at least 1, got -1"]
            case .minMaxRequests: ["URLDispatcher.EndpointLimits.init: maxRequests must be at least 1, got \(Int.min)"]
            case .minLongLimit: ["URLDispatcher.EndpointLimits.init: maxLongRequests must not be negative, got \(Int.min)"]
            case .negativeMaxRetryAfterAtInit: ["URLDispatcher.EndpointLimits.init: maxRetryAfter must not be negative, got -0.001 seconds"]
            case .nanTimeoutInterval: ["URLDispatcher.stream(for:kind:timeout:idleTimeout:): the request's timeoutInterval must be a number, got nan"]
            case .negativeTimeout: ["URLDispatcher.data(for:kind:timeout:queueTimeout:): timeout must not be negative, got -0.005 seconds"]
            case .negativeQueueTimeout: ["URLDispatcher.data(for:kind:timeout:queueTimeout:): queueTimeout must not be negative, got -1.0 seconds"]
            case .negativeStreamTimeout: ["URLDispatcher.stream(for:kind:timeout:idleTimeout:): timeout must not be negative, got -0.005 seconds"]
            case .negativeIdleTimeout: ["URLDispatcher.stream(for:kind:timeout:idleTimeout:): idleTimeout must not be negative, got -2.0 seconds"]
            case .farNegativeIdleTimeout: ["URLDispatcher.stream(for:kind:timeout:idleTimeout:): idleTimeout must not be negative, got -"]
            case .negativeDataSyncTimeout: ["URLDispatcher.dataSync(for:timeout:): timeout must not be negative, got -0.001 seconds"]
            case .negativeTimeoutIntervalAtDispatch: ["URLDispatcher.dispatch(_:kind:delegate:): the request's timeoutInterval must not be negative, got -1.0"]
            case .negativeTimeoutIntervalAtDataSync: ["URLDispatcher.dataSync(for:timeout:): the request's timeoutInterval must not be negative, got -0.5"]
            case .serverWithoutConnections: ["LoopbackHTTPServer.init(maxConnections:): maxConnections must be at least 1, got 0"]
            case .serverWithNegativeConnections: ["LoopbackHTTPServer.init(maxConnections:): maxConnections must be at least 1, got -1"]
            case .parserWithoutHeadRoom: ["HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxHeadBytes must be at least 64, got 0"]
            case .parserHeadBelowItsSmallest: ["HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxHeadBytes must be at least 64, got 63"]
            case .parserHeadMin: ["HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxHeadBytes must be at least 64, got \(Int.min)"]
            case .parserNegativeBody: ["HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxBodyBytes must not be negative, got -1"]
            case .parserBodyMin: ["HTTPRequestParser.init(maxHeadBytes:maxBodyBytes:): maxBodyBytes must not be negative, got \(Int.min)"]
            }
        }

        /// Makes the call; it does not return.
        func perform() async {
            switch self {
            case .longLimitNotBelowTheTotal: _ = URLDispatcher.EndpointLimits(maxRequests: 3, maxLongRequests: 3)
            case .noRequestsAtAll: _ = URLDispatcher.EndpointLimits(maxRequests: 0, maxLongRequests: 0)
            case .explicitLongLimitAboveTheTotal: _ = URLDispatcher.EndpointLimits(maxRequests: 1, maxLongRequests: 2)
            case .negativeLongLimit: _ = URLDispatcher.EndpointLimits(maxRequests: 4, maxLongRequests: -1)
            case .limitsMadeInvalidThroughTheirPropertiesAtInit:
                var limits = URLDispatcher.EndpointLimits()
                limits.maxRequests = 3   // the long limit stays 3
                _ = URLDispatcher(limits: limits)
            case .limitsMadeInvalidThroughTheirPropertiesAtSetLimits:
                var limits = URLDispatcher.EndpointLimits()
                limits.maxRetryAfter = .seconds(-1)
                URLDispatcher().setLimits(limits, for: try! URLDispatcher.Endpoint(url: URL(string: "http://127.0.0.1:9/")!))
            case .negativeMaxRequests: _ = URLDispatcher.EndpointLimits(maxRequests: -1)
            case .minMaxRequests: _ = URLDispatcher.EndpointLimits(maxRequests: .min)
            case .minLongLimit: _ = URLDispatcher.EndpointLimits(maxRequests: 4, maxLongRequests: .min)
            case .negativeMaxRetryAfterAtInit: _ = URLDispatcher.EndpointLimits(maxRetryAfter: .milliseconds(-1))
            case .nanTimeoutInterval:
                var request = URLRequest(url: URL(string: "http://127.0.0.1:9/")!)
                request.timeoutInterval = .nan
                _ = URLDispatcher().stream(for: request)
            case .negativeTimeout:
                _ = try? await URLDispatcher().data(for: URLDispatcherExitTests.request, timeout: .milliseconds(-5))
            case .negativeQueueTimeout:
                _ = try? await URLDispatcher().data(for: URLDispatcherExitTests.request, timeout: .seconds(5), queueTimeout: .seconds(-1))
            case .negativeStreamTimeout:
                _ = URLDispatcher().stream(for: URLDispatcherExitTests.request, timeout: .milliseconds(-5))
            case .negativeIdleTimeout:
                _ = URLDispatcher().stream(for: URLDispatcherExitTests.request, timeout: .seconds(5), idleTimeout: .seconds(-2))
            case .farNegativeIdleTimeout:
                _ = URLDispatcher().stream(for: URLDispatcherExitTests.request, idleTimeout: .zero - .seconds(Int64.max) - .seconds(Int64.max))
            case .negativeDataSyncTimeout:
                _ = synchronously { try? URLDispatcher().dataSync(for: URLDispatcherExitTests.request, timeout: .milliseconds(-1)) }
            case .negativeTimeoutIntervalAtDispatch:
                var request = URLDispatcherExitTests.request
                request.timeoutInterval = -1
                _ = try? URLDispatcher().dispatch(request, delegate: IgnoringDelegate())
            case .negativeTimeoutIntervalAtDataSync:
                var request = URLDispatcherExitTests.request
                request.timeoutInterval = -0.5
                _ = synchronously { try? URLDispatcher().dataSync(for: request) }
            case .serverWithoutConnections: _ = try? LoopbackHTTPServer(maxConnections: 0)
            case .serverWithNegativeConnections: _ = try? LoopbackHTTPServer(maxConnections: -1)
            case .parserWithoutHeadRoom: _ = HTTPRequestParser(maxHeadBytes: 0)
            case .parserHeadBelowItsSmallest: _ = HTTPRequestParser(maxHeadBytes: 63)
            case .parserHeadMin: _ = HTTPRequestParser(maxHeadBytes: .min)
            case .parserNegativeBody: _ = HTTPRequestParser(maxBodyBytes: -1)
            case .parserBodyMin: _ = HTTPRequestParser(maxBodyBytes: .min)
            }
        }
    }

    /// A request to a port nothing listens on: the calls above stop before they send it.
    static let request = URLRequest(url: URL(string: "http://127.0.0.1:9/")!)

    /// A delegate that hears nothing: its call stops before any event.
    final class IgnoringDelegate: URLDispatchDelegate {
        func operation(_ operation: URLDispatchOperation, didReceive response: HTTPURLResponse) {}
        func operation(_ operation: URLDispatchOperation, didReceive data: Data) {}
        func operation(_ operation: URLDispatchOperation, didCompleteWith error: (any Error)?) {}
    }

    @Test("A bad argument stops the process with a message naming it and its value", .exitTestOnOwnThreads, arguments: BadCall.allCases)
    func stops(_ call: BadCall) async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [call] in
            await call.perform()
        }
        #expect(stopped(result, saying: call.message))
    }

    /// A default never makes a valid argument trap: the long limit's default adapts to a small
    /// `maxRequests`. (Before, `maxRequests: 3` trapped on the default of 3.)
    @Test(.exitTestOnOwnThreads) func theLongLimitsDefaultAdaptsToASmallTotal() async {
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
}
