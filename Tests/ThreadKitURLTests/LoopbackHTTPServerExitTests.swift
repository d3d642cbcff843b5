import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import LoopbackHTTPServer

/// The test server against hostile bytes and a process out of descriptors, each in a child
/// process: a server that traps must fail its test, not stop the whole run.
@Suite struct LoopbackHTTPServerExitTests {
    /// Requests the server must answer with a 400 (closing that connection), after which it keeps
    /// serving other connections.
    static let badRequests = [
        "GET /?= HTTP/1.1\nHost: x\n\n",
        "GET / HTTP/1.1\nHost: x\nContent-Length: -1\n\n",
        "GET /?bytes=-1 HTTP/1.1\nHost: x\n\n",
        "GET /stream?size=-1 HTTP/1.1\nHost: x\n\n",
        "GET /stream?chunks=-1 HTTP/1.1\nHost: x\n\n",
        "GET /?delay=99999999999999999999999 HTTP/1.1\nHost: x\n\n",
        "GET /stream?interval=9223372036854775807 HTTP/1.1\nHost: x\n\n",
        "GET /?status=0 HTTP/1.1\nHost: x\n\n",
        "GET /?retry-after=1%0D%0AX-Injected:%20y HTTP/1.1\nHost: x\n\n",
        "GET /?a=%zz HTTP/1.1\nHost: x\n\n",
        "GET /%E9 HTTP/1.1\nHost: x\n\n",
        "GET HTTP/1.1\nHost: x\n\n",
        "\u{01}\u{02}\u{03}\n\n",
        "GET / HTTP/1.1\nHost : x\n\n",
        "GET / HTTP/1.1\nContent-Length: 5\nContent-Length: 6\n\nhello!",
        "POST / HTTP/1.1\nTransfer-Encoding: chunked\n\nzz\nhello\n0\n\n",
        "POST / HTTP/1.1\nTransfer-Encoding: chunked\nContent-Length: 3\n\n0\n\n",
    ]

    @Test(.exitTestOnOwnThreads, arguments: badRequests)
    func badInputGets400AndTheServerKeepsServing(_ input: String) async {
        await #expect(processExitsWith: .success) { [input] in
            let server = try LoopbackHTTPServer()
            defer { server.shutdown() }
            let client = try #require(RawHTTPClient(port: server.port))
            client.send(input)
            let response = try #require(client.readResponse(), "no answer to \(input.debugDescription)")
            #expect(response.status == 400, "\(input.debugDescription): \(response)")
            #expect(response.headers["x-injected"] == nil)
            #expect(response.headers["connection"] == "close", "\(input.debugDescription): \(response)")
            #expect(client.closedByServer(), "\(input.debugDescription): the connection stays open after a 400")
            // Other connections are served.
            let next = try #require(RawHTTPClient(port: server.port))
            next.send("GET /?bytes=4 HTTP/1.1\nHost: x\n\n")
            #expect(next.readResponse()?.text == "xxxx", "\(input.debugDescription): the next connection is not served")
        }
    }

    /// Limits as large as `Int` allows: the numbers a client sends may exceed any `Int` without
    /// the parser's arithmetic overflowing (a trap, so in a child process).
    @Test(.exitTestOnOwnThreads) func aParserWithTheLargestLimitsAnswersHugeNumbersWith413() async {
        await #expect(processExitsWith: .success) {
            func status(_ text: String) -> Int? {
                var parser = HTTPRequestParser(maxHeadBytes: .max, maxBodyBytes: .max)
                parser.append(Array(text.utf8))
                do {
                    _ = try parser.next()
                    return nil
                } catch {
                    return error.status
                }
            }
            #expect(status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n") == 413)
            #expect(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n") == 413)
            #expect(status("POST / HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\nabc") == nil)   // waits for the body
            var parser = HTTPRequestParser(maxHeadBytes: .max, maxBodyBytes: .max)
            parser.append(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            #expect((try? parser.next())?.headers == ["host": "x"])
        }
    }

    @Test(.exitTestOnOwnThreads) func acceptBacksOffWhileOutOfDescriptorsAndAcceptsOnceOneIsFree() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            let server = try LoopbackHTTPServer()
            defer { server.shutdown() }
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            #expect(client >= 0, "socket: \(errno)")
            // The accept thread's CPU time, from its schedstat file (opened now: soon no
            // descriptor is left to open it).
            let cpuTimeFile = try #require(Self.openSchedstat(ofThreadNamed: "Loopback accept"), "no thread named Loopback accept")
            // Fill the descriptor table: a limit just above the highest descriptor open, then
            // copies of one until none is left.
            let highest = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { Int32($0) }.max() ?? 0
            var limit = rlimit()
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            limit.rlim_cur = rlim_t(highest + 8)
            #expect(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, "setrlimit: \(errno)")
            var fillers: [Int32] = []
            func fill() {
                while true {
                    let copy = dup(client)
                    guard copy >= 0 else { break }
                    fillers.append(copy)
                }
            }
            // Filled three times, 20 ms apart: a descriptor another thread of this process
            // held for a moment during the first fill (the test runtime's, Foundation's) is
            // taken once it is closed, so none is free when the connection arrives.
            for _ in 0..<3 {
                fill()
                _ = poll(nil, 0, 20)
            }
            // The server's accept now fails with EMFILE for as long as the connection waits.
            #expect(LoopbackSocket.connect(client, to: "127.0.0.1", port: server.port), "connect: \(errno)")
            let request = Array("GET /?bytes=2 HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
            #expect(send(client, request, request.count, 0) == request.count)
            let before = Self.cpuTime(cpuTimeFile)
            _ = poll(nil, 0, 1_000)   // nothing to await: the server must do (almost) nothing meanwhile
            let used = Self.cpuTime(cpuTimeFile) - before
            let accepted = server.connectionCount
            for filler in fillers { close(filler) }   // before any expectation: recording one may need a descriptor
            // For the parent to show if this child fails.
            let note = Array("test: the accept thread used \(used) of CPU; \(accepted) connections accepted\n".utf8)
            _ = note.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
            // A spinning accept thread burns all the CPU it gets (about 300 ms of the second on a
            // loaded machine, the whole second on an idle one); backing off costs well under 1 ms.
            #expect(used < .milliseconds(100), "the accept thread used \(used) of CPU in 1 s while accept failed")
            #expect(accepted == 0)
            // A descriptor is free again: the waiting connection is accepted and answered.
            var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0)]
            #expect(poll(&fds, 1, 10_000) == 1, "the waiting connection was not answered")
            var reply = [UInt8](repeating: 0, count: 256)
            let count = recv(client, &reply, reply.count, 0)
            #expect(String(decoding: reply[..<max(0, count)], as: UTF8.self).hasPrefix("HTTP/1.1 200 OK"))
            close(client)
            close(cpuTimeFile)
        }
        let log = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        if result?.exitStatus != .exitCode(EXIT_SUCCESS) { Issue.record("the child's standard error:\n\(log)") }
        #expect(log.components(separatedBy: "LoopbackHTTPServer: accept failed (Too many open files)").count == 2, "\(log)")
        #expect(log.contains("LoopbackHTTPServer: accepting again"), "\(log)")
    }

    @Test(.exitTestOnOwnThreads) func aConnectionWhoseThreadCannotStartIsAnsweredOnceThreadsStartAgain() async {
        await #expect(processExitsWith: .success) {
            let server = try LoopbackHTTPServer()
            defer { server.shutdown() }
            // Standard error into a pipe, to await the server's line saying it was refused.
            var log: [Int32] = [0, 0]
            precondition(pipe(&log) == 0)
            let standardError = dup(STDERR_FILENO)
            dup2(log[1], STDERR_FILENO)
            let (client, line) = ThreadStarts.refused { () -> (RawHTTPClient?, String) in
                guard let client = RawHTTPClient(port: server.port) else { return (nil, "") }
                client.send("GET /?bytes=2 HTTP/1.1\nHost: x\n\n")
                var fds = [pollfd(fd: log[0], events: Int16(POLLIN), revents: 0)]
                guard poll(&fds, 1, 10_000) == 1 else { return (client, "") }
                var bytes = [UInt8](repeating: 0, count: 512)
                return (client, String(decoding: bytes[..<max(0, read(log[0], &bytes, bytes.count))], as: UTF8.self))
            }
            dup2(standardError, STDERR_FILENO)
            #expect(line.hasPrefix("LoopbackHTTPServer: could not start a connection thread (Resource temporarily unavailable)"), "\(line)")
            // Threads start again: the connection, held open meanwhile, is served.
            #expect(client?.readResponse()?.text == "xx")
        }
    }

    /// An open descriptor of `/proc/self/task/<tid>/schedstat` for the thread named `name`, once
    /// it has that name (5 s at most).
    static func openSchedstat(ofThreadNamed name: String) -> Int32? {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            for task in tasks {
                let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
                if comm.trimmingCharacters(in: .whitespacesAndNewlines) == name {
                    let fd = open("/proc/self/task/\(task)/schedstat", O_RDONLY | O_CLOEXEC)
                    return fd >= 0 ? fd : nil
                }
            }
            _ = poll(nil, 0, 5)
        }
        return nil
    }

    /// The CPU time in a schedstat file (its first field, in nanoseconds), read again from the start.
    static func cpuTime(_ schedstat: Int32) -> Duration {
        var bytes = [UInt8](repeating: 0, count: 128)
        let count = pread(schedstat, &bytes, bytes.count, 0)
        let text = String(decoding: bytes[..<max(0, count)], as: UTF8.self)
        return .nanoseconds(Int64(text.split(separator: " ").first ?? "") ?? 0)
    }
}
