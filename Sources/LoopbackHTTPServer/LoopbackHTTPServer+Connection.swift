import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension LoopbackHTTPServer {
    /// Reads requests from `connection` and answers them in order until it closes.
    func serve(_ connection: Int32) {
        defer {
            withState {
                _ = $0.connections.remove(connection)
                _ = $0.idle.remove(connection)
                _ = $0.closingForRoom.remove(connection)
                if $0.counted.remove(connection) != nil { $0.current -= 1 }
            }
            close(connection)
            threadExited()
        }
        var parser = HTTPRequestParser()
        var chunk = [UInt8](repeating: 0, count: 16_384)
        var headRead: ContinuousClock.Instant?   // when the head of the request being read was read
        var continueSent = false
        while true {
            do {
                while let message = try parser.next() {
                    let arrival = headRead ?? .now
                    headRead = nil
                    continueSent = false
                    guard handle(message, arrival: arrival, on: connection), !withState({ $0.stopping }) else { return }
                }
            } catch {
                reject(error, on: connection)
                return
            }
            if parser.isReadingBody, headRead == nil { headRead = .now }
            if parser.expectsContinue, !continueSent {
                continueSent = true
                guard send(HTTPResponseBytes.continueHead, on: connection) else { return }
            }
            // Between requests the accept thread may close the connection to make room for another.
            let idle = parser.isBetweenRequests
            if idle { markIdle(connection) }
            let count = recv(connection, &chunk, chunk.count, 0)
            if idle { withState { _ = $0.idle.remove(connection) } }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }   // closed, inside a request or not: nobody to answer
            parser.append(chunk[..<count])
        }
    }

    /// Offers `connection`, which waits for a request the client has not begun, to the accept
    /// thread, and wakes that thread: it may already wait for room for another connection.
    private func markIdle(_ connection: Int32) {
        condition.lock()
        state.idle.insert(connection)
        condition.broadcast()
        condition.unlock()
    }

    /// Counts and answers one framed request; returns whether the connection stays open.
    private func handle(_ message: HTTPRequestParser.Message, arrival: ContinuousClock.Instant, on connection: Int32) -> Bool {
        let target: HTTPRequestTarget
        do {
            target = try HTTPRequestTarget(message.target)
        } catch {
            reject(error, on: connection)
            return false
        }
        var request = Request(method: message.method, path: target.path, query: target.query, headers: message.headers,
                              body: message.body, arrival: arrival)
        request.concurrent = withState {
            Self.uncountClosed(&$0, except: connection)
            $0.current += 1
            $0.counted.insert(connection)
            $0.peak = max($0.peak, $0.current)
            $0.total += 1
            $0.arrivals.append(Arrival(time: arrival, target: target.pathAndQuery))
            return $0.current
        }
        let reply = handler(request)
        // A request stops counting just before the last bytes of its answer go out: once the
        // client has them it may send its next request, which must not find this one counted.
        let finished = {
            self.withState { state in
                if state.counted.remove(connection) != nil { state.current -= 1 }
            }
        }
        let keepOpen = answer(reply, keepAlive: message.keepAlive, on: connection, finished: finished)
        finished()
        return keepOpen && message.keepAlive
    }

    /// Stops counting the requests whose client has closed its connection, before a new request is
    /// counted: a client that gave up on a request (a timeout, a cancel) closes its connection before
    /// it sends the next one, but the thread serving the old one may not have noticed yet.
    private static func uncountClosed(_ state: inout State, except connection: Int32) {
        for other in state.counted where other != connection {
            var fds = [pollfd(fd: other, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 1, 0) > 0 else { continue }
            var closed = fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
            if !closed {
                var byte: UInt8 = 0
                closed = recv(other, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) == 0
            }
            if closed {
                state.counted.remove(other)
                state.current -= 1
            }
        }
    }

    /// Sends `reply`; returns whether the connection stays open for another request (not after a
    /// response whose own `Connection` header says `close`).
    private func answer(_ reply: Reply, keepAlive: Bool, on connection: Int32, finished: () -> Void) -> Bool {
        if let problem = HTTPResponseBytes.problem(with: reply) {
            finished()
            let error = HTTPRequestError(status: 500, reason: "the handler's reply cannot be sent: \(problem)")
            return send(HTTPResponseBytes.errorReply(error, keepAlive: keepAlive), on: connection)
        }
        switch reply {
        case .respond(let status, let headers, let body, let delay):
            if delay > .zero, !sleep(delay, watching: connection) { return false }
            let bytes = HTTPResponseBytes.response(status: status, headers: headers, body: body, keepAlive: keepAlive)
            finished()
            return send(bytes, on: connection) && !HTTPResponseBytes.closesConnection(headers)
        case .hang:
            while sleep(.milliseconds(100), watching: connection) {}
            return false
        case .stream(let chunks, let chunkSize, let interval):
            guard send(HTTPResponseBytes.streamHead(keepAlive: keepAlive), on: connection) else { return false }
            var sent = 0
            while chunks.map({ sent < $0 }) ?? true {
                guard sleep(interval, watching: connection) else { return false }
                guard send(HTTPResponseBytes.chunk(sent, size: chunkSize), on: connection) else { return false }
                sent += 1
            }
            finished()
            return send(HTTPResponseBytes.lastChunk, on: connection)
        case .closeMidResponse:
            finished()
            _ = send(HTTPResponseBytes.partialResponse, on: connection)
            return false
        case .malformed:
            finished()   // the client may give up as soon as it reads these bytes
            _ = send(HTTPResponseBytes.notHTTP, on: connection)
            return false
        }
    }

    /// Answers bytes that cannot be a request with an error reply, then lets the client read it
    /// before the connection closes: it stops sending, then reads and drops what the client still
    /// sends (closing with unread bytes would reset the connection, and the reset could destroy
    /// the reply before the client reads it), until the client closes, nothing arrives for 250 ms,
    /// 2 s pass, 16 MiB arrive or the server stops.
    private func reject(_ error: HTTPRequestError, on connection: Int32) {
        guard send(HTTPResponseBytes.errorReply(error, keepAlive: false), on: connection) else { return }
        _ = Glibc.shutdown(connection, Int32(SHUT_WR))
        let end = ContinuousClock.now + .seconds(2)
        var quietEnd = ContinuousClock.now + .milliseconds(250)
        var drained = 0
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while drained < 1 << 24, !withState({ $0.stopping }) {
            let left = ContinuousClock.now.duration(to: min(end, quietEnd))
            guard left > .zero else { return }
            var fds = [pollfd(fd: connection, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 1, Self.milliseconds(min(left, .milliseconds(50)))) >= 0 || errno == EINTR else { return }
            guard fds[0].revents != 0 else { continue }
            let count = recv(connection, &chunk, chunk.count, Int32(MSG_DONTWAIT))
            if count < 0, errno == EINTR || errno == EAGAIN { continue }
            guard count > 0 else { return }
            drained += count
            quietEnd = ContinuousClock.now + .milliseconds(250)
        }
    }

    /// Waits `duration` (a year at most); returns `false` early if the client closed the
    /// connection or the server stops.
    private func sleep(_ duration: Duration, watching connection: Int32) -> Bool {
        let end = ContinuousClock.now + min(duration, .seconds(365 * 86_400))
        while true {
            if withState({ $0.stopping }) { return false }
            let left = ContinuousClock.now.duration(to: end)
            if left <= .zero { return true }
            let milliseconds = Self.milliseconds(min(left, .milliseconds(50)))
            var fds = [pollfd(fd: connection, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 1, milliseconds)
            if ready > 0 {
                if fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return false }
                var byte: UInt8 = 0
                let peeked = recv(connection, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
                if peeked == 0 { return false }
                if peeked > 0 { usleep(UInt32(milliseconds) * 1000) }   // the next request, sent early
            }
        }
    }

    /// `duration` (at most a minute) in whole milliseconds, at least 1.
    private static func milliseconds(_ duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        return Int32(max(1, min(60_000, seconds * 1000 + attoseconds / 1_000_000_000_000_000)))
    }

    private func send(_ bytes: [UInt8], on connection: Int32) -> Bool {
        Socket.sendAll(bytes, on: connection)
    }
}
