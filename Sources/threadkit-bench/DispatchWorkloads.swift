// dedicated.throughput, dedicated.sync and dispatch.sync.held: DedicatedThread and DispatchMethod
// against a serial DispatchQueue and the round-trip peers (RoundTripPeers.swift).
import Dispatch
import Foundation
import ThreadKit
import ToolHarness

/// `dedicated.*` and `dispatch.sync.held`: DedicatedThread and DispatchMethod against a serial queue.
enum DispatchWorkloads {
    static let perCall = [Metric(name: "per call", unit: "ns")]

    /// `dedicated.throughput`: a million empty closures from one producer to one thread.
    static func dedicatedThroughput(scale: Scale) -> Workload {
        let run = Throughput(items: scale.size(1_000_000))
        let thread = DedicatedThread(name: "bench.dedicated")
        let queue = DispatchQueue(label: "bench.serial")
        return run.workload("dedicated.throughput", [
            run.contender("ThreadKit", DedicatedExecute(thread: thread)),
            run.contender("GCD serial", SerialQueueAsync(queue: queue)),
        ], finish: thread.shutDown)
    }

    /// `dedicated.sync`: round-trip `sync` calls from another thread, one after another.
    ///
    /// Judged against what does the same job — runs the work on another thread and waits for it:
    /// the floor (``SpinRoundTrip``), GCD's `async` and a semaphore, and swift-nio's
    /// `submit { }.wait()` shape. GCD's serial `sync` is shown for information: on an idle queue it
    /// runs the work on the caller's own thread, which a dedicated thread must never do.
    static func dedicatedSync(scale: Scale) -> Workload {
        let calls = scale.size(200_000)
        let thread = DedicatedThread(name: "bench.sync")
        let queue = DispatchQueue(label: "bench.sync.serial")
        return Workload(
            id: "dedicated.sync", metrics: perCall,
            contenders: [
                Contender(name: "ThreadKit", warmingUpOnATenth: { share in timePerCall(share.of(calls)) { thread.sync { blackHole() } } }),
                Contender(name: "GCD serial", warmingUpOnATenth: { share in timePerCall(share.of(calls)) { queue.sync { blackHole() } } }),
            ] + roundTripPeers(calls: calls),
            finish: thread.shutDown)
    }

    /// `dispatch.sync.held`: `DispatchMethod.sync` onto a serial queue from a thread that already
    /// holds two contexts (it runs work for a dedicated thread and a one-thread pool), against
    /// `DispatchQueue.sync` from the same thread: what re-entry detection costs a held thread.
    ///
    /// A held thread serves nested requests while it waits, so ThreadKit hands the work to the
    /// queue and waits for it, a round trip to the queue's thread, where GCD's `sync` runs it
    /// inline: the goal is against the floor of that round trip, from the same thread.
    static func syncWhileHolding(scale: Scale) -> Workload {
        let calls = scale.size(200_000)
        let outer = DedicatedThread(name: "bench.held")
        let pool = ThreadPool(name: "bench.held", size: 1)
        let queue = DispatchQueue(label: "bench.held.serial")
        let method = DispatchMethod.sync(on: .serialQueue(queue))
        /// Runs `body` on the dedicated thread, inside a sync onto the one-thread pool.
        func holdingTwo(_ body: @escaping @Sendable () -> Measurement) -> Measurement {
            outer.sync { (try? DispatchMethod.sync(on: .pool(pool)).execute(body).wait()) ?? Measurement() }
        }
        return Workload(
            id: "dispatch.sync.held", metrics: perCall,
            contenders: [
                Contender(name: "ThreadKit", warmingUpOnATenth: { share in
                    holdingTwo { timePerCall(share.of(calls)) { method.execute { blackHole() } } }
                }),
                Contender(name: "GCD serial", warmingUpOnATenth: { share in
                    holdingTwo { timePerCall(share.of(calls)) { queue.sync { blackHole() } } }
                }),
                Contender(name: "floor", warmingUpOnATenth: { share in
                    holdingTwo { timePerCall(share.of(calls), on: SpinRoundTrip()) }
                }),
            ],
            finish: {
                outer.shutDown()
                pool.dispose()
            })
    }

    /// The round-trip peers of `dedicated.sync`. Each makes its thread in the round that measures
    /// it, so that no other contender's process has a spinning or polling thread of theirs.
    private static func roundTripPeers(calls: Int) -> [Contender] {
        let peers: [(String, @Sendable () -> any RoundTrip)] = [
            ("floor", { SpinRoundTrip() }),
            ("GCD async+wait", { GCDAsyncAndWait(queue: DispatchQueue(label: "bench.sync.async")) }),
            ("NIO-shaped", { NIOShapedLoop() }),
        ]
        return peers.map { name, make in
            Contender(name: name, warmingUpOnATenth: { share in timePerCall(share.of(calls), on: make()) })
        }
    }

    /// `calls` empty round trips through `peer`, which is stopped after; the wall time per call.
    private static func timePerCall(_ calls: Int, on peer: some RoundTrip) -> Measurement {
        defer { peer.stop() }
        return timePerCall(calls) { peer.call { blackHole() } }
    }

    /// Calls `body` `calls` times; the wall time per call.
    private static func timePerCall(_ calls: Int, _ body: () -> Void) -> Measurement {
        let start = ContinuousClock.now
        for _ in 0..<calls { body() }
        let elapsed = ContinuousClock.now - start
        return Measurement(values: ["per call": elapsed.nanoseconds / Double(calls)])
    }
}

/// An empty body the optimizer cannot remove.
@inline(never)
func blackHole() {}
