// A redis-server of the test's own, on a Unix socket in a temporary folder: started, paused,
// resumed, killed and restarted on the same path, and always stopped.

import Foundation
import ThreadKitRedis
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Whether the Redis tests can run, and what to say when they cannot.
enum RedisAvailability {
    /// `redis-server` on PATH, or `nil`.
    static let executable: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/redis-server"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }()

    /// Whether a redis-server was found.
    static var isAvailable: Bool { executable != nil }

    /// Whether a missing server is a failure rather than a skip: `THREADKIT_REQUIRE_REDIS=1`, which
    /// `.ci/run` sets after installing the server.
    static var isRequired: Bool { ProcessInfo.processInfo.environment["THREADKIT_REQUIRE_REDIS"] == "1" }

    /// Why the Redis tests were skipped, and how to run them.
    static let skipMessage: Comment = "redis-server is not on PATH, so the Redis tests are skipped; install it with `apt-get install -y redis-server` (Debian, Ubuntu) to run them"
}

import Testing

/// A server of the test's own. Stop it on every path (``withRedisServer(_:)`` does).
final class RedisServer: @unchecked Sendable {
    // Sendable: `pid` is only touched by the test that owns the server, one step at a time.
    let directory: String
    var socketPath: String { directory + "/redis.sock" }
    var address: RedisClient.Address { .unixSocket(path: socketPath) }
    private(set) var pid: pid_t = 0

    /// Makes the folder and starts the server; returns once it answers PING.
    init() throws {
        var template = Array((NSTemporaryDirectory() + "threadkit-redis-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw ServerError("mkdtemp failed: errno \(errno)") }
        directory = String(cString: made)
        try start()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Starts the server on the socket path (again, after ``kill()``) and waits until it answers
    /// PING, for at most 10 s.
    func start() throws {
        guard let executable = RedisAvailability.executable else { throw ServerError("no redis-server on PATH") }
        let arguments = [
            executable, "--port", "0", "--unixsocket", socketPath, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", directory, "--logfile", directory + "/redis.log",
            "--daemonize", "no",
        ]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        // The server gets an empty signal mask and default dispositions: the test runner's thread
        // may block or ignore signals (SIGTERM among them), and a spawned child inherits both.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGCONT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, &argv, environ)
        guard result == 0 else { throw ServerError("posix_spawn of \(executable) failed: error \(result)") }
        pid = child
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if answersPing() { return }
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child {
                pid = 0
                throw ServerError("redis-server exited at start (status \(status)); see \(directory)/redis.log")
            }
            usleep(2_000)
        }
        stop()
        throw ServerError("redis-server did not answer PING within 10 s")
    }

    /// Whether the server answers PING on its socket now (a raw exchange, without the client under test).
    func answersPing() -> Bool {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8)) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { return false }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let ping = Array("PING\r\n".utf8)
        guard send(descriptor, ping, ping.count, Int32(MSG_NOSIGNAL)) == ping.count else { return false }
        var reply = [UInt8](repeating: 0, count: 16)
        let count = recv(descriptor, &reply, reply.count, 0)
        return count >= 7 && Array(reply[0..<7]) == Array("+PONG\r\n".utf8)
    }

    /// Stops the server: SIGTERM, then SIGKILL if it has not exited within 5 s; waits for it.
    func stop() {
        guard pid > 0 else { return }
        kill(pid, SIGCONT)
        kill(pid, SIGTERM)
        if !reap(within: .seconds(5)) {
            kill(pid, SIGKILL)
            _ = reap(within: .seconds(5))
        }
        pid = 0
    }

    /// Kills the server at once (SIGKILL) and waits for it; ``start()`` brings it back on the same path.
    func kill() {
        guard pid > 0 else { return }
        Glibc.kill(pid, SIGKILL)
        _ = reap(within: .seconds(5))
        pid = 0
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    func pause() {
        if pid > 0 { Glibc.kill(pid, SIGSTOP) }
    }

    /// Lets a paused server go on (SIGCONT).
    func resume() {
        if pid > 0 { Glibc.kill(pid, SIGCONT) }
    }

    private func reap(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        var status: Int32 = 0
        while ContinuousClock.now < deadline {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid || (result < 0 && errno == ECHILD) { return true }
            usleep(2_000)
        }
        return false
    }

    private func kill(_ pid: pid_t, _ signal: Int32) {
        Glibc.kill(pid, signal)
    }

    struct ServerError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}

/// Runs `body` with a server of its own, and stops the server however `body` ends.
func withRedisServer<Result>(_ body: (RedisServer) async throws -> Result) async throws -> Result {
    let server = try RedisServer()
    defer { server.stop() }
    return try await body(server)
}
