import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension Diagnostics {
    /// Where ``dumpOnSignal(_:to:)`` writes the dump.
    public enum Output: Sendable, Equatable {
        /// The process's standard error (file descriptor 2).
        case standardError
        /// The process's standard output (file descriptor 1).
        case standardOutput
        /// An open file descriptor of the caller's, which must stay open while dumps may come.
        case fileDescriptor(Int32)
        /// A file, created if needed; each dump is appended.
        case file(path: String)
    }

    /// Writes the dump (``Snapshot/description``) to `output` each time the process receives
    /// `signal`, as the JVM does on `SIGQUIT` and Go on `SIGQUIT`: `kill -USR1 <pid>` shows what a
    /// stuck service is doing without a debugger.
    ///
    /// The signal handler only writes one byte to a pipe, which is async-signal-safe; a thread of
    /// ThreadKit's (`"ThreadKit diagnostics"`), started on the first call, reads it, takes the
    /// snapshot and writes it. Signals that arrive while a dump is written are coalesced into one
    /// more dump. Calling it again for the same signal changes where its dumps go. The handler
    /// replaces the signal's previous disposition for the rest of the process's life.
    ///
    /// - Parameters:
    ///   - signal: The signal to dump on: `SIGUSR1`, `SIGUSR2`, `SIGQUIT`…; not `SIGKILL` or
    ///     `SIGSTOP`, which cannot be caught.
    ///   - output: Where the dump goes; standard error by default.
    public static func dumpOnSignal(_ signal: Int32, to output: Output = .standardError) {
        precondition(
            signal > 0 && signal < 65 && signal != SIGKILL && signal != SIGSTOP,
            "Diagnostics.dumpOnSignal(_:to:): signal must be a catchable signal number, got \(signal)")
        SignalDumps.shared.install(signal, output)
    }
}

/// The pipe from the signal handlers to the thread that writes the dumps.
private final class SignalDumps: Sendable {
    static let shared = SignalDumps()

    /// The pipe's write end, read by the handler: an atomic load is async-signal-safe.
    static let writeEnd = Atomic<Int32>(-1)

    private let outputs = Locked([Int32: Diagnostics.Output]())

    private init() {
        var ends: [Int32] = [0, 0]
        precondition(pipe(&ends) == 0, "Diagnostics.dumpOnSignal: pipe() failed with error \(errno)")
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        // A flood of signals must never block the handler: a full pipe drops the byte, and the
        // dump the bytes already queued will bring covers it.
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        Self.writeEnd.store(ends[1], ordering: .releasing)
        let readEnd = ends[0]
        do {
            try NamedThread.start(name: "ThreadKit diagnostics", kernelName: "TK diagnostics") {
                Self.serve(readEnd)
            }
        } catch {
            preconditionFailure("Diagnostics.dumpOnSignal: cannot start its thread: pthread_create failed with error \(error.errno)")
        }
    }

    func install(_ signal: Int32, _ output: Diagnostics.Output) {
        outputs.withLock { $0[signal] = output }
        // The thread takes the signals it serves even if the thread that started it blocked them.
        var control = Self.unblockSignals
        _ = write(Self.writeEnd.load(ordering: .acquiring), &control, 1)
        var action = sigaction()
        #if canImport(Glibc) || canImport(Musl)
        action.__sigaction_handler.sa_handler = { signal in SignalDumps.handle(signal) }
        #else
        action.__sigaction_u.__sa_handler = { signal in SignalDumps.handle(signal) }
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = Int32(SA_RESTART)
        precondition(sigaction(signal, &action, nil) == 0, "Diagnostics.dumpOnSignal(_:to:): sigaction(\(signal)) failed with error \(errno)")
    }

    /// The handler: writes the signal's number to the pipe, and nothing else.
    private static func handle(_ signal: Int32) {
        let saved = errno
        var byte = UInt8(truncatingIfNeeded: signal)
        _ = write(writeEnd.load(ordering: .acquiring), &byte, 1)
        errno = saved
    }

    /// The thread's loop: for each byte, the dump, to the output of the signal it names.
    private static func serve(_ readEnd: Int32) {
        let activity = ThreadActivity.current
        var bytes = [UInt8](repeating: 0, count: 64)
        while true {
            activity.sleeping()
            let count = read(readEnd, &bytes, bytes.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            activity.running("dump")
            // Signals read at once give one dump per distinct output, in the order they came.
            let signals = bytes[..<count].map { Int32($0) }
            let (outputs, served) = shared.outputs.withLock { table in (signals.compactMap { table[$0] }, Array(table.keys)) }
            if bytes[..<count].contains(unblockSignals) { unblock(served) }
            var written: [Diagnostics.Output] = []
            for output in outputs where !written.contains(output) {
                written.append(output)
                deliver(Diagnostics.snapshot().description, to: output)
            }
        }
    }

    /// The byte ``install(_:_:)`` writes after a signal is added: no signal has the number 0.
    private static let unblockSignals: UInt8 = 0

    /// Unblocks `signals` on the calling thread, which inherited the mask of the thread that
    /// started it: a process-directed signal (`kill -USR1 <pid>`) then reaches it even if every
    /// other thread blocks it.
    private static func unblock(_ signals: [Int32]) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// Writes `text` to `output`. A file that cannot be opened gets no dump: there is nowhere
    /// left to say so.
    private static func deliver(_ text: String, to output: Diagnostics.Output) {
        switch output {
        case .standardError: writeAll(text, to: STDERR_FILENO)
        case .standardOutput: writeAll(text, to: STDOUT_FILENO)
        case .fileDescriptor(let descriptor): writeAll(text, to: descriptor)
        case .file(let path):
            let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else { return }
            writeAll(text, to: descriptor)
            close(descriptor)
        }
    }

    private static func writeAll(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let count = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            bytes = bytes.dropFirst(count)
        }
    }
}
