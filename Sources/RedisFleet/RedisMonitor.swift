// A MONITOR connection: what a fleet's parent sees of every start the shared throttle script records.
import Foundation
@_spi(ThreadKitURL) import ThreadKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A `MONITOR` connection to a server on a Unix socket, read on a thread of its own: every command
/// the server runs, with those a Lua script runs among them (`[0 lua] "RPUSH" …`).
package final class RedisMonitor: Sendable {
    private let descriptor: Int32
    private let lines = Locked<[String]>([])
    private let stopped = Locked(false)
    private let finished = Locked(false)

    /// Connects, sends `MONITOR`, and starts reading.
    package init(socketPath: String) throws {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw FleetError("MONITOR: socket failed: errno \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8.prefix($0.count - 1))) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let command = Array("MONITOR\r\n".utf8)
        guard connected == 0, send(descriptor, command, command.count, Int32(MSG_NOSIGNAL)) == command.count else {
            close(descriptor)
            throw FleetError("MONITOR could not reach \(socketPath): errno \(errno)")
        }
        self.descriptor = descriptor
        do {
            try ModuleThreads.start(name: "fleet monitor", kernelName: "fleet-monitor") { [self] in read() }
        } catch {
            close(descriptor)
            throw FleetError("MONITOR: \(error)")
        }
        // The server's +OK says the connection is monitoring: commands sent after it are all seen.
        let deadline = ContinuousClock.now + .seconds(10)
        while lines.withLock({ $0.isEmpty }), ContinuousClock.now < deadline { usleep(1_000) }
    }

    private func read() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !stopped.withLock({ $0 }) {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { break }
            guard count > 0 else { continue }
            pending += buffer[0..<count]
            var complete: [String] = []
            while let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                complete.append(String(decoding: pending[..<end], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
                pending.removeSubrange(...end)
            }
            lines.withLock { $0 += complete }
        }
        finished.withLock { $0 = true }
    }

    /// Every line so far.
    package var all: [String] { lines.withLock { $0 } }

    /// Stops reading (within 50 ms) and closes the connection; once, however often it is called.
    package func stop() {
        guard stopped.withLock({ stopped in
            defer { stopped = true }
            return !stopped
        }) else { return }
        let deadline = ContinuousClock.now + .seconds(5)
        while !finished.withLock({ $0 }), ContinuousClock.now < deadline { usleep(1_000) }
        // A reader still in recv after 5 s keeps the descriptor: closing it under the reader could
        // let the number be reused by another connection before the reader's next recv.
        if finished.withLock({ $0 }) { close(descriptor) }
    }

    /// The value of every `RPUSH` to `key` that a script ran (`[0 lua] "RPUSH" "key" "value"`).
    package func scriptPushes(to key: String) -> [String] {
        let prefix = "[0 lua] \"RPUSH\" \"\(key)\" \""
        return all.compactMap { line in
            guard let range = line.range(of: prefix) else { return nil }
            return String(line[range.upperBound...].dropLast())
        }
    }
}

/// Something a fleet run could not do, said plainly.
package struct FleetError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
