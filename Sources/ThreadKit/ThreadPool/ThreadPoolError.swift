/// Why a ``ThreadPool`` refused work.
public enum ThreadPoolError: Error, Equatable, CustomStringConvertible {
    /// The pool was disposed; it accepts no more work.
    case disposed(pool: String)
    /// The pool's queue holds `limit` tasks and its overflow policy is ``ThreadPool/OverflowPolicy/reject``.
    case queueFull(pool: String, limit: Int)
    /// The pool had no thread to run the work and the system refused to start one: `errno` is
    /// `pthread_create`'s error (`EAGAIN`: out of memory for a stack, or a limit on threads reached).
    case threadStartFailed(pool: String, errno: Int32)

    /// A sentence that names the pool and why it refused, e.g. "ThreadPool 'Images' refused a task:
    /// its queue is full (limit 100)".
    public var description: String {
        switch self {
        case .disposed(let pool): disposedDescription(of: "ThreadPool", named: pool)
        case .queueFull(let pool, let limit): Self.refusal(by: pool, "its queue is full (limit \(limit))")
        case .threadStartFailed(let pool, let errno):
            Self.refusal(by: pool, "it has no thread and the system would not start one (errno \(errno))")
        }
    }

    /// How the pool's refusals of a task read: "ThreadPool '<pool>' refused a task: <reason>".
    private static func refusal(by pool: String, _ reason: String) -> String {
        "ThreadPool '\(pool)' refused a task: \(reason)"
    }
}
