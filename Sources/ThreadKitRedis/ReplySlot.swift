import Foundation
import ThreadKit

/// Where one command's result arrives, and how its caller waits for it: a blocked thread, or a
/// suspended task.
///
/// The first ``complete(_:)`` wins; later ones (a timeout racing a reply) do nothing. Completing
/// cancels the command's timeout call and wakes the caller: it resumes a continuation or signals a
/// condition, never runs user code, so the reader thread and the shared timer thread may do it.
final class ReplySlot: @unchecked Sendable {
    // Sendable: `result`, `continuation` and `timer` are guarded by `condition`'s lock.
    private let condition = NSCondition()
    private var result: Result<RESPValue, RedisError>?
    private var continuation: CheckedContinuation<Result<RESPValue, RedisError>, Never>?
    private var timer: TimerHandle?

    /// Sets the result, if none was set, and wakes the caller.
    func complete(_ result: Result<RESPValue, RedisError>) {
        condition.lock()
        guard self.result == nil else {
            condition.unlock()
            return
        }
        self.result = result
        let continuation = self.continuation.take()
        let timer = self.timer.take()
        condition.broadcast()
        condition.unlock()
        timer?.cancel()
        continuation?.resume(returning: result)
    }

    /// Keeps the command's timeout call, to cancel it when the result comes; cancels it at once if
    /// the result came first.
    func attach(_ timer: TimerHandle) {
        condition.lock()
        guard result == nil else {
            condition.unlock()
            timer.cancel()
            return
        }
        self.timer = timer
        condition.unlock()
    }

    /// Blocks the calling thread until the result is in. The command's timeout bounds the wait.
    func blockingWaitForResult() -> Result<RESPValue, RedisError> {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let result { return result }
            condition.wait()
        }
    }

    /// Suspends until the result is in. The command's timeout bounds the wait; cancelling the task
    /// does not end it early, since the command is already on its way.
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
