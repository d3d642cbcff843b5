// The redis-server the redis.* rows measure against: the benchmark's own, on a Unix socket in a
// temporary folder, started once per process on first use and stopped when the workload finishes.
import Foundation
import ThreadKitRedis
import ToolHarness

/// The benchmark's own redis-server (never a system one).
final class BenchRedisServer: @unchecked Sendable {
    // Sendable: `process` is set in init and stopped only through `stopShared()` (under ServerSlot's
    // lock) or by init itself, before the server is shared.
    /// `redis-server` on PATH, or `nil`: the redis.* rows are then skipped, saying so.
    static let executable: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/redis-server" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// Why the redis.* rows did not run, when there is no server.
    static let skipReason = "redis-server is not on PATH (install it with `apt-get install -y redis-server` to measure the shared limits)"

    let directory: String
    var socketPath: String { directory + "/redis.sock" }
    private let process: Process

    /// Starts a server and waits (5 s at most) until it answers PING.
    init() throws {
        guard let executable = Self.executable else { throw BenchRedisError(Self.skipReason) }
        directory = NSTemporaryDirectory() + "threadkit-bench-redis-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = [
            "--port", "0", "--unixsocket", directory + "/redis.sock", "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
            "--dir", directory, "--logfile", directory + "/redis.log", "--daemonize", "no",
        ]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let probe = RedisClient(.unixSocket(path: directory + "/redis.sock"), commandTimeout: .milliseconds(200))
        guard poll(timeout: .seconds(5), until: { (try? probe.sendSync("PING"))?.string == "PONG" }) else {
            stop()
            throw BenchRedisError("redis-server did not answer PING within 5 s; see \(directory)/redis.log")
        }
    }

    /// Stops the server and removes its folder.
    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The server of this process, started on first use; ``stopShared()`` stops it.
    static func shared() throws -> BenchRedisServer {
        try sharedServer.withLock { server in
            if let server { return server }
            let started = try BenchRedisServer()
            server = started
            return started
        }
    }

    /// Stops this process's server, if one was started.
    static func stopShared() {
        sharedServer.withLock { server in
            server?.stop()
            server = nil
        }
    }

    private static let sharedServer = ServerSlot()
}

/// The process's one server, behind a lock.
private final class ServerSlot: @unchecked Sendable {
    // Sendable: `server` is only touched inside `withLock`, under `lock`.
    private let lock = NSLock()
    private var server: BenchRedisServer?

    func withLock<Result>(_ body: (inout BenchRedisServer?) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&server)
    }
}

/// A redis.* row that could not run.
struct BenchRedisError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
