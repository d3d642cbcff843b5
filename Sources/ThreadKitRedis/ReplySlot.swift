import ThreadKit

/// Where one command's result arrives, and how its caller waits for it: a blocked thread, or a
/// suspended task.
///
/// The first ``complete(_:)`` wins; later ones (a deadline racing a reply) do nothing. Completing
/// wakes the caller: it resumes a continuation or signals a condition, never runs user code, so the
/// connection's thread may do it.
final class ReplySlot: @unchecked Sendable {
    // Sendable: `result`, `continuation` and `then` are guarded by `condition`'s mutex.
    private let condition = ModuleCondition()
    private var result: Result<RESPValue, RedisError>?
    private var continuation: CheckedContinuation<Result<RESPValue, RedisError>, Never>?
    /// The client's own follow-up (never user code), called once with the result, after the lock.
    /// Taken out when the slot completes, so a completed slot holds nothing: the pipeline drops
    /// slots under the client's lock, and what a follow-up captures (a coordinator, the last
    /// reference to a client) must not be released there.
    private var then: (@Sendable (Result<RESPValue, RedisError>) -> Void)?

    /// A slot; `then`, if any, is the client's follow-up to the result (run by whoever completes it).
    init(then: (@Sendable (Result<RESPValue, RedisError>) -> Void)? = nil) {
        self.then = then
    }

    /// Sets the result, if none was set, and wakes the caller.
    func complete(_ result: Result<RESPValue, RedisError>) {
        condition.lock()
        guard self.result == nil else {
            condition.unlock()
            return
        }
        self.result = result
        let continuation = self.continuation.take()
        let then = self.then.take()
        condition.broadcast()
        condition.unlock()
        continuation?.resume(returning: result)
        then?(result)
    }

    /// Blocks the calling thread until the result is in, or until `deadline` on the monotonic clock:
    /// then the result is `timeout` (the connection's thread fails a command at its deadline; this
    /// bound holds even if that thread cannot run).
    func blockingWaitForResult(until deadline: ContinuousClock.Instant, timeout: RedisError) -> Result<RESPValue, RedisError> {
        condition.lock()
        while result == nil {
            guard condition.wait(until: deadline) || result != nil else {
                condition.unlock()
                complete(.failure(timeout))
                condition.lock()
                break
            }
        }
        defer { condition.unlock() }
        return result!
    }

    /// Suspends until the result is in. The connection's thread fails the command at its deadline;
    /// cancelling the task does not end the wait early, since the command may be on its way.
    func result() async -> Result<RESPValue, RedisError> {
        await withCheckedContinuation { continuation in
            condition.lock()
            if let result {
                condition.unlock()
                continuation.resume(returning: result)
            } else {
                self.continuation = continuation
                condition.unlock()
            }
        }
    }
}

extension Optional {
    /// The value, leaving `nil` behind.
    mutating func take() -> Wrapped? {
        defer { self = nil }
        return self
    }
}
