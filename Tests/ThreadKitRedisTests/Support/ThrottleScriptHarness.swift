// Runs the shared throttle script on a test's own server, with made-up times, and reads back what
// it keeps under the limit's keys.

import Testing
import ThreadKit
@testable import ThreadKitRedis

/// The script's keys as the server holds them.
struct StoredThrottle: Equatable, CustomStringConvertible {
    /// The state's fields, numbers as text; the line as `waiters`: `asker:since:liveUntil` each,
    /// comma-separated, oldest first.
    var fields: [String: String]
    /// The log, oldest first.
    var log: [Int64]
    /// The keys' remaining lives in milliseconds (`PTTL`: -1 no TTL, -2 no key).
    var stateTTL: Int64
    var logTTL: Int64

    func number(_ field: String) -> Int64? { fields[field].flatMap { Int64($0) } }

    var description: String { "\(fields.sorted { $0.key < $1.key }) log \(log) TTLs \(stateTTL)/\(logTTL)" }
}

/// One limit's script on a server of the test's own.
struct ThrottleScriptHarness {
    let client: RedisClient
    let keys: RedisLimitKeys

    init(_ server: RedisServer, key: String = "api.example.com") {
        client = makeClient(server.address)
        keys = RedisLimitKeys(key)
    }

    func run(_ operation: SharedThrottleCall.Operation, now: Int64?) async throws -> SharedThrottleCall.Reply {
        try await SharedThrottleCall(operation, now: now).run(on: client, keys: keys)
    }

    func reserve(
        _ now: Int64?, gap: Int64 = 100, monitor: ThrottledQueue.Monitor = .concurrent,
        limit: (count: Int, window: Int64)? = nil, horizon: Int64 = 1_000_000, leaseTTL: Int64 = 10_000,
        holding: UInt64? = nil, token: UInt64 = 1, asker: UInt64 = 1
    ) async throws -> SharedThrottle.Decision {
        let limit = limit.map { SharedThrottleCall.Limit(count: $0.count, window: $0.window) }
        let reply = try await run(
            .reserve(gap: gap, monitor: monitor, limit: limit, horizon: horizon, leaseTTL: leaseTTL, holding: holding,
                     token: token, asker: asker), now: now)
        guard case .decision(let decision) = reply else { throw UnexpectedReply(reply: reply) }
        return decision
    }

    struct UnexpectedReply: Error { let reply: SharedThrottleCall.Reply }

    func finished(_ token: UInt64, number: Int64 = 1, now: Int64?) async throws -> Bool {
        try await run(.finished(token: token, number: number), now: now) == .finished(true)
    }

    func pause(_ duration: Int64, now: Int64?) async throws -> Int64? {
        guard case .paused(let until) = try await run(.pause(duration: duration), now: now) else {
            Issue.record("pause did not answer with the pause in force")
            return nil
        }
        return until
    }

    func stored() async throws -> StoredThrottle {
        let stateKey = SharedThrottleScript.keys(keys)[0]
        let logKey = SharedThrottleScript.keys(keys)[1]
        let fields = try Self.fields(of: await client.send("GET", stateKey))
        let log = (try await client.send("LRANGE", logKey, "0", "-1").array ?? []).map { Int64($0.string ?? "") ?? -1 }
        let stateTTL = try await client.send("PTTL", stateKey).integer ?? 0
        let logTTL = try await client.send("PTTL", logKey).integer ?? 0
        // What the script keeps of the log's key is not the model's: `logged`, how many starts the
        // log holds, is checked here; `logUntil` is the log's TTL, which the callers check.
        var modelFields = fields
        if let logged = modelFields.removeValue(forKey: "logged") {
            #expect(logged == String(log.count), "the state says the log holds \(logged) starts, it holds \(log)")
        }
        modelFields["logUntil"] = nil
        if let waiting = modelFields.removeValue(forKey: "waiting") {
            let listed = modelFields["waiters"].map { $0.split(separator: ",").count } ?? 0
            #expect(waiting == String(listed), "the state says \(waiting) waiters follow, \(listed) do")
        }
        return StoredThrottle(fields: modelFields, log: log, stateTTL: stateTTL, logTTL: logTTL)
    }

    struct BadState: Error { let reply: RESPValue }

    /// The state key's fields (`SharedThrottleScript.stateFields`, little-endian doubles, -1 for
    /// none, then `waiting` waiters of three doubles each), numbers in decimal, the monitor by name
    /// and the waiters as `waiters`; none for no key.
    static func fields(of reply: RESPValue) throws -> [String: String] {
        guard case .bulkString(let bytes?) = reply else {
            guard reply.isNull else { throw BadState(reply: reply) }
            return [:]
        }
        let names = SharedThrottleScript.stateFields
        func double(_ index: Int) -> Double {
            Double(bitPattern: bytes[(8 * index)..<(8 * index + 8)].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }
        guard bytes.count >= 8 * names.count, bytes.count % 24 == (8 * names.count) % 24 else { throw BadState(reply: reply) }
        let waiting = (bytes.count - 8 * names.count) / 24
        guard double(names.count - 1) == Double(waiting) else { throw BadState(reply: reply) }
        var fields: [String: String] = [:]
        let waiters = (0..<waiting).map { waiter in
            (0..<3).map { String(Int64(double(names.count + 3 * waiter + $0))) }.joined(separator: ":")
        }
        if !waiters.isEmpty { fields["waiters"] = waiters.joined(separator: ",") }
        for (index, name) in names.enumerated() {
            let value = double(index)
            // `logUntil` is a time plus a TTL, which may pass 2^53 µs for a state that lasts "never".
            let largest = name == "logUntil" ? 2 * Double(SharedThrottleCall.maxMicroseconds) : Double(SharedThrottleCall.maxMicroseconds)
            guard value == value.rounded(), value >= -1, value <= largest else {
                throw BadState(reply: reply)
            }
            guard value >= 0 else { continue }
            switch (name, value) {
            case ("monitor", 0): fields[name] = "concurrent"
            case ("monitor", 1): fields[name] = "serial"
            case ("monitor", _): throw BadState(reply: reply)
            default: fields[name] = String(Int64(value))
            }
        }
        return fields
    }

    /// Every key of the limit has a TTL (or does not exist), and the log holds at most `count` starts.
    func expectBounded(count: Int?, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let state = try await stored()
        #expect(state.stateTTL > 0 || state.stateTTL == -2, "the state key has no TTL: \(state)", sourceLocation: sourceLocation)
        #expect(state.logTTL > 0 || state.logTTL == -2, "the log key has no TTL: \(state)", sourceLocation: sourceLocation)
        #expect(state.log.count <= (count ?? 0), "the log is longer than N: \(state)", sourceLocation: sourceLocation)
        let all = try await client.send("KEYS", "*").array ?? []
        for key in all {
            let ttl = try await client.send("PTTL", key.string ?? "").integer ?? 0
            #expect(ttl > 0, "\(key) has no TTL", sourceLocation: sourceLocation)
        }
    }
}

extension SharedThrottle {
    /// What the script answers to `call` (whose `now` is set), as this model decides it: the
    /// reference of the differential test.
    mutating func apply(_ call: SharedThrottleCall) -> SharedThrottleCall.Reply {
        let now = call.now!
        switch call.operation {
        case .reserve(let gap, let monitor, let limit, let horizon, let leaseTTL, let holding, let token, let asker):
            return .decision(request(Request(
                now: now, gap: gap, monitor: monitor, limit: limit.map { ($0.count, $0.window) }, horizon: horizon,
                leaseTTL: leaseTTL, holding: holding, token: token, asker: asker)))
        case .finished(let token, let number):
            return .finished(finished(token: token, number: number, now: now))
        case .renew(let token, let leaseTTL):
            return .renewed(renew(token: token, leaseTTL: leaseTTL, now: now))
        case .pause(let duration):
            return .paused(until: pause(for: duration, now: now))
        }
    }

    /// The fields the script keeps for this state, numbers in decimal (the line as ``StoredThrottle/fields`` has it).
    var expectedFields: [String: String] {
        var fields: [String: String] = ["lastGap": String(lastGap)]
        fields["lastNow"] = lastNow.map { String($0) }
        fields["lastStart"] = lastStart.map { String($0) }
        fields["lastEnd"] = lastEnd.map { String($0) }
        fields["token"] = lease.map { String($0.token) }
        fields["expiry"] = lease.map { String($0.expiry) }
        fields["reserves"] = lease.map { String($0.reserves) }
        fields["ends"] = lease.map { String($0.ends) }
        if !waiters.isEmpty {
            fields["waiters"] = waiters.map { "\($0.asker):\($0.since):\($0.liveUntil)" }.joined(separator: ",")
        }
        fields["pausedUntil"] = pausedUntil.map { String($0) }
        fields["monitor"] = rules.map { $0.monitor == .serial ? "serial" : "concurrent" }
        fields["count"] = rules.map { String($0.limit?.count ?? 0) }
        fields["window"] = rules.map { String($0.limit?.window ?? 0) }
        return fields
    }
}

extension RedisClient {
    /// One field of the shared throttle's state under `stateKey`, as `HGET` would answer it: the
    /// field in decimal (the monitor by name) as a bulk string, the null bulk string when the state
    /// does not hold it.
    func throttleStateField(_ stateKey: String, _ name: String) async throws -> RESPValue {
        Self.field(name, of: try ThrottleScriptHarness.fields(of: await send("GET", stateKey)))
    }

    /// ``throttleStateField(_:_:)``, blocking the calling thread.
    @available(*, noasync, message: "it blocks the thread; use 'try await throttleStateField(_:_:)' in async code")
    func throttleStateFieldSync(_ stateKey: String, _ name: String) throws -> RESPValue {
        Self.field(name, of: try ThrottleScriptHarness.fields(of: sendSync("GET", stateKey)))
    }

    private static func field(_ name: String, of fields: [String: String]) -> RESPValue {
        .bulkString(fields[name].map { Array($0.utf8) })
    }
}
