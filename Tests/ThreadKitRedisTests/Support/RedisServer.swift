// The tests' side of the shared redis-server launcher (RedisFleet's RedisServer): the skip or
// failure when there is none, and a server for the length of a test.

import Foundation
import RedisFleet
import Testing
import ThreadKitTestSupport

/// The shared launcher, under the name the tests use.
typealias RedisServer = RedisFleet.RedisServer

/// Whether the Redis tests can run, and what to say when they cannot.
enum RedisAvailability {
    /// Whether a redis-server was found on PATH.
    static var isAvailable: Bool { RedisFleet.RedisAvailability.isAvailable }

    /// Whether a missing server is a failure rather than a skip: `THREADKIT_REQUIRE_REDIS=1`, which
    /// `.ci/run` sets after installing the server.
    static var isRequired: Bool { ProcessInfo.processInfo.environment["THREADKIT_REQUIRE_REDIS"] == "1" }

    /// Why the Redis tests were skipped, and how to run them.
    static let skipMessage: Comment = "redis-server is not on PATH, so the Redis tests are skipped; install it with `apt-get install -y redis-server` (Debian, Ubuntu) to run them"
}

extension Trait where Self == ConditionTrait {
    /// For every suite that starts a redis-server: skipped, saying how to install it, when there is
    /// none on PATH; run anyway (and failing at the server's start) under `THREADKIT_REQUIRE_REDIS=1`,
    /// so that CI never skips them silently.
    static var needsRedisServer: Self {
        .enabled(if: RedisAvailability.isAvailable || RedisAvailability.isRequired, RedisAvailability.skipMessage)
    }
}

/// Runs `body` with a server of its own, and stops the server however `body` ends. The server's
/// start (which waits for PING) and stop (which waits for the process) run on a thread of their own.
func withRedisServer<Result>(tcp: Bool = false, _ body: (RedisServer) async throws -> Result) async throws -> Result {
    let server = try await RedisServer.started(tcp: tcp)
    do {
        let result = try await body(server)
        await server.stopped()
        return result
    } catch {
        await server.stopped()
        throw error
    }
}

/// The launcher's blocking steps, each on a new thread that the test awaits: starting waits for the
/// server to answer PING and stopping waits for its process, for milliseconds on an idle machine and
/// far longer on a loaded one, which must never hold one of Swift concurrency's few threads (every
/// other test's tasks wait for them).
extension RedisServer {
    /// A new server, started (as `RedisServer(tcp:)` does).
    static func started(tcp: Bool = false) async throws -> RedisServer {
        try await onNewThread { Swift.Result { try RedisServer(tcp: tcp) } }.get()
    }

    /// Starts the server again on the same path, after ``RedisServer/kill()``.
    func startedAgain() async throws {
        try await onNewThread { [self] in Swift.Result { try start() } }.get()
    }

    /// Kills the server (SIGKILL) and waits for its process.
    func killed() async {
        await onNewThread { [self] in kill() }
    }

    /// Stops the server and waits for its process.
    func stopped() async {
        await onNewThread { [self] in stop() }
    }
}
