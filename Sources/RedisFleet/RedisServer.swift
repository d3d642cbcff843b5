// A redis-server of the caller's own, on a Unix socket in a temporary folder (`--port 0 --save ""
// --appendonly no`), under a watchdog that kills it if the starting process dies: started,
// paused, resumed, killed and restarted on the same path, and always stopped. Shared by the Redis
// tests, the benchmark's redis.* rows and the demo's Redis step.

import Foundation
import ThreadKitRedis
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Whether a redis-server can be started here, and what to say when it cannot.
package enum RedisAvailability {
    /// `redis-server` on PATH, or `nil`.
    package static let executable: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/redis-server"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }()

    /// Whether a redis-server was found.
    package static var isAvailable: Bool { executable != nil }

    /// What is missing, and how to get it.
    package static let skipReason = "redis-server is not on PATH; install it with `apt-get install -y redis-server` (Debian, Ubuntu)"
}

/// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34), which Swift's Glibc module does not
/// declare: found in the C library at run time; `nil` where there is none.
private let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32)? =
    dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np").map {
        unsafeBitCast($0, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32).self)
    }

/// A redis-server of the caller's own (a test's, the benchmark's, the demo's): never a system one.
/// Stop it on every path (``stop()``; `deinit` stops it too and removes its folder).
///
/// The server runs under a watchdog shell whose standard input is a pipe from the starting process:
/// when that process ends, even by a crash, the pipe closes and the shell kills the server.
package final class RedisServer: @unchecked Sendable {
    // Sendable: `pid`, `watchdog` and `lifeline` are only touched by the owner of the server, one step at a time.
    package let directory: String
    package var socketPath: String { directory + "/redis.sock" }
    /// The TCP port on 127.0.0.1, for a server started with `tcp: true`.
    package let port: Int?
    /// The Unix socket, or 127.0.0.1 and the port.
    package var address: RedisClient.Address { port.map { .tcp(host: "127.0.0.1", port: $0) } ?? .unixSocket(path: socketPath) }
    /// The redis-server process.
    package private(set) var pid: pid_t = 0
    /// The watchdog shell, the server's parent.
    private var watchdog: pid_t = 0
    /// The write end of the watchdog's standard input: closing it kills the server.
    private var lifeline: Int32 = -1

    /// Makes the folder and starts the server (also on a free TCP port of 127.0.0.1 with `tcp`);
    /// returns once it answers PING.
    package init(tcp: Bool = false) throws {
        var template = Array((NSTemporaryDirectory() + "threadkit-redis-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw ServerError("mkdtemp failed: errno \(errno)") }
        directory = String(cString: made)
        port = tcp ? try Self.freePort() : nil
        try start()
    }

    /// A port of 127.0.0.1 that was free a moment ago: bound, read, closed.
    package static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        guard bound == 0 else { throw ServerError("no free port on 127.0.0.1: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Starts the server on the socket path (again, after ``kill()``) and waits until it answers
    /// PING, for at most 10 s.
    package func start() throws {
        guard let executable = RedisAvailability.executable else {
            throw ServerError(RedisAvailability.skipReason)
        }
        let listen = port.map { ["--port", String($0), "--bind", "127.0.0.1"] } ?? ["--port", "0"]
        // The shell starts the server, says its pid, and kills it once its standard input closes.
        let watchdogScript = #"exec 3>&1; "$0" "$@" </dev/null >/dev/null 2>&1 & echo $! >&3; exec 3>&-; read _; kill -9 $! 2>/dev/null; wait"#
        let arguments = ["/bin/sh", "-c", watchdogScript, executable] + listen + [
            "--unixsocket", socketPath, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", directory, "--logfile", directory + "/redis.log",
            "--daemonize", "no",
        ]
        var input: [Int32] = [-1, -1], output: [Int32] = [-1, -1]
        guard pipe(&input) == 0, pipe(&output) == 0 else { throw ServerError("pipe failed: errno \(errno)") }
        _ = fcntl(input[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        // No other descriptor of the starting process (sockets of other tests among them) goes to the server.
        if let addCloseFrom { _ = addCloseFrom(&actions, 3) }
        // The server gets an empty signal mask and default dispositions: the starting thread
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
        let result = posix_spawn(&child, "/bin/sh", &actions, &attributes, &argv, environ)
        close(input[0])
        close(output[1])
        defer { close(output[0]) }
        guard result == 0 else {
            close(input[1])
            throw ServerError("posix_spawn of /bin/sh for \(executable) failed: error \(result)")
        }
        watchdog = child
        lifeline = input[1]
        var said: [UInt8] = []
        var byte: UInt8 = 0
        while read(output[0], &byte, 1) == 1, byte != UInt8(ascii: "\n") { said.append(byte) }
        guard let serverPid = pid_t(String(decoding: said, as: UTF8.self)) else {
            stop()
            throw ServerError("the watchdog shell did not say the server's pid")
        }
        pid = serverPid
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if answersPing() { return }
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child {
                (pid, watchdog) = (0, 0)
                close(lifeline)
                lifeline = -1
                throw ServerError("redis-server exited at start (status \(status)); see \(directory)/redis.log")
            }
            usleep(2_000)
        }
        stop()
        throw ServerError("redis-server did not answer PING within 10 s")
    }

    /// Whether the server answers PING on its socket now (a raw exchange, without the client under test).
    package func answersPing() -> Bool {
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

    /// Stops the server: closes the watchdog's standard input, so that it kills the server (SIGKILL:
    /// a server that saves nothing loses nothing), and waits for both.
    package func stop() {
        guard watchdog > 0 else { return }
        if lifeline >= 0 { close(lifeline) }
        lifeline = -1
        if !reap(within: .seconds(5)) {
            Glibc.kill(pid, SIGKILL)
            Glibc.kill(watchdog, SIGKILL)
            _ = reap(within: .seconds(5))
        }
        (pid, watchdog) = (0, 0)
    }

    /// Kills the server at once (SIGKILL) and waits for it; ``start()`` brings it back on the same path.
    package func kill() {
        guard pid > 0 else { return }
        Glibc.kill(pid, SIGKILL)
        stop()
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    package func pause() {
        if pid > 0 { Glibc.kill(pid, SIGSTOP) }
    }

    /// Lets a paused server go on (SIGCONT).
    package func resume() {
        if pid > 0 { Glibc.kill(pid, SIGCONT) }
    }

    /// Waits for the watchdog, which exits once the server has (it waits for it).
    private func reap(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        var status: Int32 = 0
        while ContinuousClock.now < deadline {
            let result = waitpid(watchdog, &status, WNOHANG)
            if result == watchdog || (result < 0 && errno == ECHILD) { return true }
            usleep(2_000)
        }
        return false
    }

    package struct ServerError: Error, CustomStringConvertible {
        package let description: String
        package init(_ description: String) { self.description = description }
    }
}
