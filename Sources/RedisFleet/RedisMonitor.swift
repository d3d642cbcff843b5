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
package final class RedisMonitor: @unchecked Sendable {
    // Sendable: `lines`, `stopped` and `finished` are guarded by `condition`'s mutex; `descriptor` is
    // set once in init.
    private let descriptor: Int32
    private let condition = ModuleCondition()
    private var lines: [String] = []
    private var stopped = false
    private var finished = false

    /// Connects, sends `MONITOR`, starts reading, and returns once the server has confirmed (its
    /// `+OK`), for at most 10 s: every command sent after that is seen.
    package init(socketPath: String) throws {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw FleetError("MONITOR: socket failed: errno \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8.prefix($0.count - 1))) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
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
        let deadline = ContinuousClock.now + .seconds(10)
        condition.lock()
        while lines.isEmpty, !finished, condition.wait(until: deadline) {}
        let confirmed = !lines.isEmpty
        condition.unlock()
        guard confirmed else {
            stop()
            throw FleetError("MONITOR on \(socketPath) was not confirmed within 10 s")
        }
    }

    /// Reads until the server closes the connection or ``stop()`` shuts it down: each complete line
    /// is taken from a read index into the bytes received, and the consumed bytes are dropped once
    /// per read, so a large read costs time in proportion to its size.
    private func read() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            pending += buffer[0..<count]
            var complete: [String] = []
            var lineStart = pending.startIndex
            while let end = pending[lineStart...].firstIndex(of: UInt8(ascii: "\n")) {
                complete.append(String(decoding: pending[lineStart..<end], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
                lineStart = end + 1
            }
            pending.removeFirst(lineStart - pending.startIndex)
            condition.lock()
            lines += complete
            condition.broadcast()
            condition.unlock()
        }
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    /// Every line so far.
    package var all: [String] {
        condition.lock()
        defer { condition.unlock() }
        return lines
    }

    /// Stops reading (shutting the connection down ends the reader's `recv` at once) and closes
    /// the connection; once, however often it is called.
    package func stop() {
        condition.lock()
        let first = !stopped
        stopped = true
        condition.unlock()
        guard first else { return }
        shutdown(descriptor, Int32(SHUT_RDWR))
        let deadline = ContinuousClock.now + .seconds(5)
        condition.lock()
        while !finished, condition.wait(until: deadline) {}
        let ended = finished
        condition.unlock()
        // A reader still in recv after 5 s keeps the descriptor: closing it under the reader could
        // let the number be reused by another connection before the reader's next recv.
        if ended { close(descriptor) }
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
