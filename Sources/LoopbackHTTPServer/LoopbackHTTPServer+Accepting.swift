import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension LoopbackHTTPServer {
    /// What the accept thread does after `accept` failed with an `errno`.
    enum AcceptFailure: Equatable {
        /// Transient (interrupted, nothing to accept after all, a connection reset or a network
        /// error passed on by Linux): poll again at once.
        case retry
        /// Out of descriptors or memory, or anything else: wait ``backOff`` before trying again,
        /// so that the thread never spins on a listener that stays readable.
        case backOff

        /// How long the accept thread waits after a ``backOff`` failure.
        static let backOffInterval: Int32 = 100   // milliseconds

        init(errno error: Int32) {
            switch error {
            case EINTR, EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO, EPERM,
                 ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP, ENETUNREACH:
                self = .retry
            default:
                self = .backOff
            }
        }
    }

    /// Accepts connections and starts a thread for each, at most ``maxConnections`` at once.
    func acceptLoop() {
        defer { threadExited() }
        var failing: Int32?   // the errno of the back-off episode under way, logged once
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0)]
            if poll(&fds, 2, -1) < 0 {
                if errno != EINTR { backOff() }   // ENOMEM: never spin
                continue
            }
            if fds[1].revents != 0 || withState({ $0.stopping }) { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            guard waitForConnectionSlot() else { return }
            // Linux's accepted socket does not inherit the listener's O_NONBLOCK: it blocks. It is
            // close-on-exec from the start (accept4), so a child spawned meanwhile never inherits it.
            let connection = acceptCloseOnExec(listener)
            guard connection >= 0 else {
                let error = errno
                guard AcceptFailure(errno: error) == .backOff else { continue }
                if failing != error {
                    failing = error
                    Self.log("accept failed (\(String(cString: strerror(error)))); trying again every \(AcceptFailure.backOffInterval) ms")
                }
                backOff()
                continue
            }
            if failing != nil {
                failing = nil
                Self.log("accepting again")
            }
            var yes: Int32 = 1
            setsockopt(connection, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            guard startServing(connection) else { return }
        }
    }

    /// Starts the thread that serves `connection`. While the system refuses threads, it writes one
    /// line to standard error and tries again every ``AcceptFailure/backOffInterval``, the
    /// connection kept open, so its request is answered once a thread can start. Returns `false`,
    /// the connection closed, once the server stops.
    private func startServing(_ connection: Int32) -> Bool {
        var refused = false
        while true {
            let admitted = withState { state -> Bool in
                guard !state.stopping else { return false }
                state.connections.insert(connection)
                state.threads += 1
                return true
            }
            guard admitted else {
                close(connection)
                return false
            }
            let error = Self.startThread(named: "Loopback conn") { [self] in serve(connection) }
            guard error != 0 else {
                if refused { Self.log("a connection thread started") }
                return true
            }
            withState { state in
                state.connections.remove(connection)
                state.threads -= 1
            }
            if !refused {
                refused = true
                Self.log("could not start a connection thread (\(String(cString: strerror(error)))); trying again every \(AcceptFailure.backOffInterval) ms")
            }
            backOff()
        }
    }

    /// Waits ``AcceptFailure/backOffInterval``, or less if the server stops.
    private func backOff() {
        var wake = [pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0)]
        _ = poll(&wake, 1, AcceptFailure.backOffInterval)
    }

    /// Waits until fewer than ``maxConnections`` connections are served, while a connection waits
    /// to be accepted: closes an idle one to make room, or else waits for one to close. Returns
    /// `false` once the server stops.
    private func waitForConnectionSlot() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !state.stopping, state.connections.count >= maxConnections {
            // One at a time: the room one closed connection makes is enough for the connection
            // that waits. Its thread, in recv, sees the end and leaves; it closes the descriptor
            // only after taking it out of `idle` under this lock, so the descriptor is still its
            // own here.
            if state.closingForRoom.isEmpty, let idle = state.idle.popFirst() {
                _ = Glibc.shutdown(idle, Int32(SHUT_RDWR))
                state.closingForRoom.insert(idle)
            }
            condition.wait()
        }
        return !state.stopping
    }

    /// Writes `message` to standard error, as one line.
    static func log(_ message: String) {
        let line = Array("LoopbackHTTPServer: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}

#if !canImport(Darwin)
/// Linux's `accept4`, which Swift's Glibc module does not declare (it is a GNU extension), found in
/// the C library at run time; `nil` where there is none.
private let accept4Function: (@convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32)? =
    dlsym(UnsafeMutableRawPointer(bitPattern: 0), "accept4").map { unsafeBitCast($0, to: (@convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32).self) }
#endif

/// Accepts a connection on `listener` that is close-on-exec from the start (`accept4` with
/// `SOCK_CLOEXEC`), so a child process spawned at the same moment never inherits it; where there is
/// no `accept4`, `accept` then `FD_CLOEXEC`.
func acceptCloseOnExec(_ listener: Int32) -> Int32 {
    #if !canImport(Darwin)
    if let accept4Function { return accept4Function(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue)) }
    #endif
    let connection = accept(listener, nil, nil)
    if connection >= 0 { _ = fcntl(connection, F_SETFD, FD_CLOEXEC) }
    return connection
}
