#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(ThreadKitURL) import ThreadKit

/// Resolving a Redis server's host name within the deadline of the command that connects.
///
/// `getaddrinfo` cannot be interrupted and may block for as long as the system's resolver retries
/// (seconds per server and attempt), so a name is resolved on a thread of its own while the
/// connection's thread waits for it until the deadline. A client resolves through one
/// ``Resolver``: one lookup at a time, and its addresses kept for a while (see ``Memo``), so a
/// resolver slower than the command timeout still connects (the next connect uses the answer that
/// came late) and a resolver that hangs holds one thread per client. A numeric address
/// (`127.0.0.1`, `::1`) is converted at once, without a thread.
enum HostLookup {
    /// One address a host resolved to: the socket address's bytes and its family.
    struct Address: Sendable, Equatable {
        let family: Int32
        let bytes: [UInt8]
    }

    /// Why a host has no address.
    enum Failure: Error, Equatable {
        /// The resolver's answer (no such host, no network), or no thread to ask it on.
        case failed(String)
        /// The deadline passed first.
        case pastDeadline

        var reason: String {
            switch self {
            case .failed(let reason): reason
            case .pastDeadline: "resolving the host name took past the deadline"
            }
        }
    }

    /// Resolves a host name and port, blocking as long as that takes.
    typealias Lookup = @Sendable (_ host: String, _ port: Int) -> Result<[Address], Failure>

    /// The system's resolver, `getaddrinfo`.
    static let system: Lookup = { host, port in addresses(host, port, flags: 0) }

    /// How long a lookup's addresses serve the connects that follow, unless a failure forgets them
    /// first: long enough to reach a server whose name resolves slower than the command timeout,
    /// short enough to follow a changed record soon (a common DNS TTL).
    static let freshFor = Duration.seconds(30)

    /// `host`'s addresses if it is a numeric address, converted without asking a resolver.
    static func numeric(_ host: String, _ port: Int) -> [Address]? {
        try? addresses(host, port, flags: AI_NUMERICHOST).get()
    }

    /// `getaddrinfo` for a stream socket of any family, with `flags`.
    private static func addresses(_ host: String, _ port: Int, flags: Int32) -> Result<[Address], Failure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        hints.ai_flags = flags
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else { return .failure(.failed(String(cString: gai_strerror(status)))) }
        defer { freeaddrinfo(list) }
        var found: [Address] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            let bytes = UnsafeRawBufferPointer(start: current.pointee.ai_addr, count: Int(current.pointee.ai_addrlen))
            found.append(Address(family: current.pointee.ai_family, bytes: Array(bytes)))
            entry = current.pointee.ai_next
        }
        return .success(found)
    }

    /// What one client knows of its host's lookups (pure: the ``Resolver`` carries it out): at most
    /// one lookup in flight, and the last one's answer.
    ///
    /// A connect uses addresses found less than ``HostLookup/freshFor`` ago at once, else waits
    /// for the lookup in flight, else starts one. An answer that comes after its connect gave up
    /// is kept all the same, for the next connect. A failed answer goes to the connect waiting for
    /// it and is not kept: the next connect asks again.
    struct Memo {
        /// What a connect does.
        enum Next: Equatable {
            /// Connect to these addresses.
            case use([Address])
            /// Start lookup number `n` (counting from 1), then wait for its answer.
            case start(Int)
            /// Wait for the answer of lookup `n`, already in flight.
            case await(Int)
        }

        let freshFor: Duration
        /// How many lookups were started.
        private(set) var started = 0
        private var inFlight = false
        /// The last lookup's answer, when it came, and its number.
        private var answer: (number: Int, result: Result<[Address], Failure>, at: ContinuousClock.Instant)?

        init(freshFor: Duration = HostLookup.freshFor) {
            self.freshFor = freshFor
        }

        mutating func next(at now: ContinuousClock.Instant) -> Next {
            if let answer, case .success(let addresses) = answer.result, now - answer.at < freshFor {
                return .use(addresses)
            }
            if inFlight { return .await(started) }
            started += 1
            inFlight = true
            return .start(started)
        }

        /// The lookup in flight answered.
        mutating func finished(_ result: Result<[Address], Failure>, at now: ContinuousClock.Instant) {
            inFlight = false
            answer = (started, result, now)
        }

        /// Lookup `number`'s answer, once it came (and until another lookup's replaces it).
        func answer(of number: Int) -> Result<[Address], Failure>? {
            guard let answer, answer.number == number else { return nil }
            return answer.result
        }

        /// A connect failed (or a connection made to these addresses failed): the next connect
        /// looks the name up again rather than reuse them. A lookup in flight goes on.
        mutating func forget() {
            guard let kept = answer, case .success = kept.result else { return }
            answer = nil
        }
    }

    /// One client's lookups of its host: the ``Memo``'s decisions carried out, each lookup on a
    /// thread of its own, waited for until the connect's deadline.
    final class Resolver: @unchecked Sendable {
        // Sendable: `memo` is guarded by `condition`'s mutex; the rest is immutable.
        let host: String
        let port: Int
        private let lookup: Lookup
        private let condition = ModuleCondition()
        private var memo: Memo
        private var lookingUp: ThreadActivity?

        init(host: String, port: Int, lookup: @escaping Lookup, freshFor: Duration = HostLookup.freshFor) {
            self.host = host
            self.port = port
            self.lookup = lookup
            self.memo = Memo(freshFor: freshFor)
        }

        /// How many lookups were started.
        var started: Int {
            condition.lock()
            defer { condition.unlock() }
            return memo.started
        }

        /// The host's addresses: at once for a numeric address or fresh ones, else from the
        /// lookup in flight or a new one, waited for until `deadline` (``Failure/pastDeadline``
        /// after it; the answer is kept for the next call).
        func resolve(until deadline: ContinuousClock.Instant) -> Result<[Address], Failure> {
            if let numeric = HostLookup.numeric(host, port) { return .success(numeric) }
            condition.lock()
            let number: Int
            switch memo.next(at: .now) {
            case .use(let addresses):
                condition.unlock()
                return .success(addresses)
            case .await(let inFlight):
                number = inFlight
            case .start(let new):
                number = new
                condition.unlock()
                do {
                    try ModuleThreads.start(name: "Redis lookup \(host)", kernelName: "Redis lookup") { [self] in
                        let activity = ThreadActivity.current
                        activity.running("looking up \(host)")
                        condition.lock()
                        lookingUp = activity
                        condition.unlock()
                        finish(lookup(host, port))
                    }
                } catch {
                    finish(.failure(.failed("no thread could be started to resolve the name: \(error)")))
                }
                condition.lock()
            }
            defer { condition.unlock() }
            while memo.answer(of: number) == nil, condition.wait(until: deadline) {}
            return memo.answer(of: number) ?? .failure(.pastDeadline)
        }

        /// The thread of the lookup in flight, if one is (for the diagnostics).
        var lookupThread: ThreadActivity? {
            condition.lock()
            defer { condition.unlock() }
            return lookingUp
        }

        /// Connecting to the addresses failed: see ``Memo/forget()``.
        func forget() {
            condition.lock()
            memo.forget()
            condition.unlock()
        }

        private func finish(_ result: Result<[Address], Failure>) {
            condition.lock()
            memo.finished(result, at: .now)
            lookingUp = nil
            condition.broadcast()
            condition.unlock()
        }
    }
}
