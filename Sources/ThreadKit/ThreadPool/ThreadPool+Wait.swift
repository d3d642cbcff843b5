extension ThreadPool {
    /// Runs `work` on a pool thread and blocks the calling thread until it has run.
    ///
    /// - Throws: What `work` threw, the pool's refusal, or ``ThreadPoolError/disposed(pool:)`` if
    ///   ``disposeNow()`` handed the work back before it ran.
    func runAndWait<T>(_ work: () throws -> T) throws -> T {
        var result: Result<T, any Error>?
        try withoutActuallyEscaping(work) { work in
            let borrowed = BorrowedWork { result = Result { try work() } }
            let task = try schedule { borrowed.run() }
            task.wait()
            borrowed.discard()  // handed back unrun: the pool may still hold the task a moment
        }
        guard let result else { throw ThreadPoolError.disposed(pool: name) }
        return try result.get()
    }
}

/// A caller's non-escaping closure, lent to another thread while the caller blocks until it ran.
///
/// It must not outlive the caller's wait (`withoutActuallyEscaping` checks that), so whoever ends
/// the loan lets go of it: the thread that runs it, at once after running, or the caller, if it
/// was never run.
final class BorrowedWork: @unchecked Sendable {
    // Sendable: `work` is taken once, by the running thread while the caller blocks, or by the
    // caller after its wait ended (which orders it after any run).
    private var work: (() -> Void)?

    init(_ work: @escaping () -> Void) {
        self.work = work
    }

    /// Runs the work and releases it.
    func run() {
        work.take()?()
    }

    /// Releases the work if it never ran.
    func discard() {
        work = nil
    }
}
