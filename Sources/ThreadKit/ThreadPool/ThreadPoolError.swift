/// Why a ``ThreadPool`` refused work.
public enum ThreadPoolError: Error, Equatable, CustomStringConvertible {
    /// The pool was disposed; it accepts no more work.
    case disposed(pool: String)
    /// The pool's queue holds `limit` tasks and its overflow policy is ``ThreadPool/OverflowPolicy/reject``.
    case queueFull(pool: String, limit: Int)

    public var description: String {
        switch self {
        case .disposed(let pool):
            "ThreadPool '\(pool)' is disposed and accepts no more work"
        case .queueFull(let pool, let limit):
            "ThreadPool '\(pool)' refused a task: its queue is full (limit \(limit))"
        }
    }
}
