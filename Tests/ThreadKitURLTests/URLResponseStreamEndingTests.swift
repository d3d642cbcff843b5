import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@_spi(ThreadKitURL) import ThreadKit
@testable import ThreadKitURL

/// How a stream's iteration ends when the task that iterates is cancelled while the rest of the
/// body is on its way: the loop throws `CancellationError`, or it ends normally with the whole
/// body; it never ends normally with part of it.
@Suite struct URLResponseStreamEndingTests {
    static let response = HTTPURLResponse(url: URL(string: "http://127.0.0.1/")!, statusCode: 200,
                                          httpVersion: "HTTP/1.1", headerFields: nil)!

    @Test func aCancelledIterationNeverEndsNormallyWithPartOfTheBody() async throws {
        let outcomes = try await bounded(.seconds(60)) { () -> [String: Int] in
            var outcomes: [String: Int] = [:]
            for _ in 0..<100 {
                let (stream, sink) = URLResponseStream.make {}
                let chunks = Locked(0)
                let iteration = Task { () -> String in
                    do {
                        for try await element in stream {
                            if case .data = element { chunks.withLock { $0 += 1 } }
                        }
                        let received = chunks.withLock { $0 }
                        return received == 2 ? "the whole body" : "a normal end after \(received) of 2 chunks"
                    } catch is CancellationError {
                        return "cancelled"
                    } catch {
                        return "\(error)"
                    }
                }
                sink.deliver(.response(Self.response))
                sink.deliver(.data(Data([1])))
                #expect(await eventually { chunks.withLock { $0 } == 1 })
                // The task now waits for the second chunk: the rest of the body comes right after its cancel.
                iteration.cancel()
                sink.deliver(.data(Data([2])))
                sink.deliver(.completion(nil))
                outcomes[await iteration.value, default: 0] += 1
            }
            return outcomes
        }
        #expect(Set(outcomes.keys).isSubset(of: ["cancelled", "the whole body"]), "\(outcomes)")
    }

    @Test func aBodyCompleteBeforeTheCancelIsStillDeliveredToItsEnd() async throws {
        let (stream, sink) = URLResponseStream.make {}
        sink.deliver(.response(Self.response))
        sink.deliver(.data(Data([1])))
        sink.deliver(.data(Data([2])))
        sink.deliver(.completion(nil))
        let chunks = try await bounded {
            try await Task { () -> Int in
                withUnsafeCurrentTask { $0?.cancel() }
                var chunks = 0
                for try await element in stream {
                    if case .data = element { chunks += 1 }
                }
                return chunks
            }.value
        }
        #expect(chunks == 2)
    }
}
