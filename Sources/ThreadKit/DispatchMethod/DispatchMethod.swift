/// A stored "how and where to run": inline, asynchronously or synchronously on a target, or after a delay.
///
/// A type can keep one as a property and let its user change it, so that the user decides where
/// the type's work runs:
///
/// ```swift
/// final class Cache {
///     var dispatch: DispatchMethod = .async(on: .pool(.shared))
///     func store(_ value: Value) { dispatch.execute { self.write(value) } }
/// }
/// cache.dispatch = .sync(on: .thread(db))
/// ```
///
/// ``execute(_:)`` returns an ``ExecutionChain`` that carries the result on to further steps.
///
/// **Arguments.** `.after` with a negative delay cannot work: `execute`, `run` and
/// ``ExecutionChain/then(_:_:)`` stop with a precondition failure naming it and the value
/// (`DispatchMethod.after: delay must not be negative, got -1.0 seconds`), as
/// ``TimerThread/schedule(after:tag:_:)`` does. A zero delay runs the step as soon as the timer
/// thread hands it on; one however far out (`.seconds(Int64.max)` and beyond) never runs it, and
/// the chain can still be cancelled.
public enum DispatchMethod: Sendable {
    /// On the calling thread, at once.
    case inline
    /// Queued on the target; `execute` returns at once.
    case async(on: DispatchTarget)
    /// On the target, with the caller blocked until it ran; `execute` returns after the work.
    /// From work the target is running already, it runs inline instead of waiting for itself.
    ///
    /// `execute` blocks the calling thread meanwhile, so it belongs in synchronous code (a plain
    /// function, a thread); from async code, ``DispatchMethod/run(_:)`` runs the work the same way
    /// and suspends instead of blocking.
    case sync(on: DispatchTarget)
    /// Queued on the target once `delay` has passed, counted from the call, through
    /// ``TimerThread/shared``; never earlier.
    case after(Duration, on: DispatchTarget)

    /// Runs `work` as this method says and returns the chain that carries its result.
    ///
    /// With `.inline` and `.sync`, `work` has run when this returns. A refused submission (a
    /// disposed pool, thread or throttled queue) fails the chain with the refusal's error.
    ///
    /// `work` stays `@Sendable` (``run(_:)``'s is `sending`): it is stored in the chain until it
    /// runs, and whichever thread gets to it — the target's, a waiter that runs it inline, the
    /// timer's for `.after`, one that cancels the chain — runs or releases it.
    ///
    /// Inlinable so that `.inline` and `.sync`, the calls that return a finished chain, are
    /// specialized for `T` where they are made: the chain costs them one finished link, with no
    /// lock and no type metadata looked up (a `.sync` target still hands the work over its own way).
    @discardableResult @inlinable
    public func execute<T: Sendable>(_ work: @escaping @Sendable () throws -> T) -> ExecutionChain<T> {
        switch self {
        case .inline:
            return ExecutionChain(finished: Result { try work() })
        case .sync(let target):
            var result: Result<T, any Error>?
            do {
                try target.runAndWait { result = Result { try work() } }
            } catch {
                result = .failure(error)
            }
            return ExecutionChain(finished: result!)
        case .async, .after:
            return queued(work)
        }
    }

    /// `execute` for `.async` and `.after`: the first link of a chain whose step is yet to run.
    @usableFromInline
    func queued<T: Sendable>(_ work: @escaping @Sendable () throws -> T) -> ExecutionChain<T> {
        checkArguments()
        let chain = ExecutionChain<T>(group: ChainGroup(), previous: nil)
        dispatch(for: chain, work)
        return chain
    }

    /// Runs `work` as this method says and suspends (without blocking a thread) until it has run.
    ///
    /// `.sync(on:)` runs like `.async(on:)` here: an async caller must not block its thread, so it
    /// suspends while the target runs the work. `.inline` runs `work` in the calling task.
    ///
    /// `work` is `sending`: it runs once, on the target, so it may use non-Sendable values the
    /// caller made and hands over. (``execute(_:)`` and ``ExecutionChain/then(_:_:)`` keep
    /// `@Sendable`: their work is stored in a chain that any thread may dispatch, cancel or
    /// release, and a `.sync` step may run on the waiting thread or the target's.)
    ///
    /// Cancelling the calling task before `work` has begun removes it: it never runs, and this
    /// throws `CancellationError` (a task cancelled before the call submits nothing). Once begun,
    /// `work` runs to its end and this returns its result. From inside a ``ThrottledQueue/run(isolation:_:)``'s
    /// work, a method whose target is that queue runs `work` in the calling task, nested in the
    /// running one (see ``ExecutionChain/value``), instead of waiting for a turn that cannot come.
    ///
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, `CancellationError`, or the target's refusal.
    public func run<T: Sendable>(_ work: sending @escaping () throws -> T) async throws -> T {
        // Without this, a cancelled caller could hand its work to an idle thread, which starts it
        // before the cancellation is seen.
        try Task.checkCancellation()
        let work = SendingWork(work)
        switch self {
        case .inline:
            return try work()
        case .sync(let target):
            return try await DispatchMethod.async(on: target).queued { try work() }.value
        case .async, .after:
            return try await queued { try work() }.value
        }
    }

    /// Stops, naming the argument and its value, if this method cannot work: an `.after` with a
    /// negative delay. Checked where the method is handed over (`execute`, `run`, `then`), not when
    /// its step comes to be dispatched, perhaps on another thread.
    func checkArguments() {
        if case .after(let delay, _) = self {
            precondition(delay >= .zero, "DispatchMethod.after(_:on:): delay must not be negative, got \(delay)")
        }
    }

    /// Runs `work` as this method says for `link`, unless its chain (or the task awaiting the link)
    /// is cancelled first, and finishes `link` with the result (or the refusal, or
    /// `CancellationError`), exactly once.
    func dispatch<T>(for link: ExecutionChain<T>, _ work: @escaping @Sendable () throws -> T) {
        // A link that finished before its step was dispatched (cancelled) hands nothing to a target.
        guard !link.hasFinished else { return }
        let step: @Sendable () -> Void = { link.runStep(work) }
        switch self {
        case .inline:
            step()
        case .sync(let target):
            do {
                try target.runAndWait(step)
            } catch {
                link.complete(.failure(error))
            }
        case .async(let target):
            let pending = PendingStep(context: target.serialContext, due: nil, work: step)
            link.dispatched(pending)
            submit(pending, to: target, for: link)
        case .after(let delay, let target):
            let pending = PendingStep(
                context: target.serialContext, due: MonotonicInstant.now().advanced(by: delay), work: step)
            link.dispatched(pending)
            do {
                try TimerThread.shared.schedule(after: delay) {
                    submit(pending, to: target, for: link, fromTimer: true)
                }
            } catch {
                link.complete(.failure(error))
            }
        }
    }

    /// Hands `pending` to `target`; from a timer call (`fromTimer`), without ever blocking the timer
    /// thread or running the step on it (see ``DispatchTarget/submitWithoutWaiting(_:)``).
    private func submit<T>(
        _ pending: PendingStep, to target: DispatchTarget, for link: ExecutionChain<T>, fromTimer: Bool = false
    ) {
        let watch = DropWatch(pending) { link.complete(.failure(CancellationError())) }
        do {
            if fromTimer {
                try target.submitWithoutWaiting { watch.run() }
            } else {
                try target.submit { watch.run() }
            }
        } catch {
            link.complete(.failure(error))  // before the watch's own failure, which is then ignored
        }
        withExtendedLifetime(watch) {}
    }
}
