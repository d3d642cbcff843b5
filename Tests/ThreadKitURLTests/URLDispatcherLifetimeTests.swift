import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitURL
import LoopbackHTTPServer

/// A weak reference, to watch an object being freed.
final class WeakBox<T: AnyObject>: @unchecked Sendable {
    // Sendable: `value` is only read after the threads that set it have been joined.
    weak var value: T?
    init(_ value: T?) { self.value = value }
}

/// A disposed dispatcher lets its session finish invalidating, whatever raced its requests' starts:
/// a transfer created and never resumed or cancelled would keep the session, and through its
/// delegate the dispatcher's engine, alive for good.
extension URLIntegrationTests {
@Suite struct URLDispatcherLifetimeTests {
    @Test func theSessionKeepsNoCacheWhateverTheConfigurationSays() {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, diskPath: nil)
        configuration.requestCachePolicy = .returnCacheDataElseLoad
        for dispatcher in [URLDispatcher(configuration: configuration), URLDispatcher(), URLDispatcher(configuration: .ephemeral)] {
            let keepsNoCache = dispatcher.core.sessionKeepsNoCache
            #expect(keepsNoCache)
            dispatcher.dispose()
        }
        #expect(configuration.urlCache != nil, "the caller's configuration is left as it was")
    }

    @Test func cancelsRacingTheStartsLeaveNoTransferThatKeepsTheSessionAlive() async throws {
        try await withServer { server in
            let core = WeakBox<URLDispatcherCore>(nil)
            try await bounded(.seconds(60)) {
                let dispatcher = URLDispatcher(limits: .init(maxRequests: 64, maxLongRequests: 1))
                core.value = dispatcher.core
                let rounds = threadSanitized ? 200 : 750
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<4 {
                        group.addTask {
                            for _ in 0..<rounds {
                                let request = Task { try await dispatcher.data(for: server.request("/?delay=50")) }
                                // Cancel around the moment the task submits its request and starts it.
                                let spin = ContinuousClock.now + .microseconds(Int64.random(in: 0...300))
                                while ContinuousClock.now < spin {}
                                request.cancel()
                                _ = await request.result
                            }
                        }
                    }
                }
                dispatcher.dispose()
            }
            #expect(await eventually(timeout: .seconds(10)) { core.value == nil },
                    "the disposed dispatcher's session never finished invalidating")
        }
    }

    @Test func disposeRacingTheStartLeavesNoTransferThatKeepsTheSessionAlive() async throws {
        try await withServer { server in
            let rounds = threadSanitized ? 50 : 200
            let cores = (0..<rounds).map { _ in WeakBox<URLDispatcherCore>(nil) }
            try await onNewThread(limit: .seconds(60)) {
                for round in 0..<rounds {
                    let dispatcher = URLDispatcher(limits: .init(maxRequests: 2, maxLongRequests: 1))
                    cores[round].value = dispatcher.core
                    let delegate = CompletionCounter()
                    DispatchQueue.concurrentPerform(iterations: 2) { side in
                        if side == 0 {
                            _ = try? dispatcher.dispatch(server.request("/?delay=50"), delegate: delegate)
                        } else {
                            dispatcher.dispose()
                        }
                    }
                }
            }
            #expect(await eventually(timeout: .seconds(10)) { cores.allSatisfy { $0.value == nil } },
                    "\(cores.count { $0.value != nil }) of \(rounds) disposed dispatchers never finished invalidating their session")
        }
    }
}
}
