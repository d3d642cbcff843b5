import Foundation
internal import ThreadLaunch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Starting threads that carry their name both in Foundation and in the kernel.
///
/// `Thread.current.name` is what Swift code sees; the kernel's name (`/proc/self/task/*/comm`) is what
/// `top -H`, `ps -L` and gdb show. The kernel keeps at most 15 bytes, so it gets a short form of the
/// name (``kernelName(for:keepingSuffix:)``). ThreadKit keeps the whole name beside it, for log
/// records (``currentName()``). On Linux, Foundation's `Thread.name` reads and writes the kernel's
/// name, so there `Thread.current.name` is the short form; elsewhere it is the whole name.
///
/// Threads are started with `pthread_create`, whose failure (no memory for a stack, a pids limit)
/// is reported as a thrown ``ThreadStartError``. Foundation's `Thread.start()` ignores that failure:
/// the thread silently never runs.
///
/// Threads started here also ask for exact timed waits: Linux may wake a thread's timed wait up to
/// its *timer slack* late, 50 µs by default, to batch wakeups. ThreadKit's deadlines (timer calls,
/// throttle gaps) are meant to the microsecond, so its threads set their slack to 1 ns.
enum NamedThread {
    /// The most bytes a kernel thread name holds, without its terminating zero.
    static let kernelNameLimit = 15

    /// Starts a new thread named `name` that runs `body` and then exits.
    ///
    /// - Parameters:
    ///   - name: The thread's whole name, for `Thread.current.name` and log records.
    ///   - kernelName: The name the kernel shows, at most ``kernelNameLimit`` bytes; by default
    ///     `name` cut to fit.
    /// - Throws: ``ThreadStartError`` with `pthread_create`'s error; `body` is then released unrun.
    static func start(name: String, kernelName: String? = nil, _ body: @escaping @Sendable () -> Void) throws(ThreadStartError) {
        let launch = Launch(name: name, kernelName: kernelName ?? Self.kernelName(for: name), body: body)
        let result = PThread.startDetached { launch.run() }
        if result != 0 { throw ThreadStartError(errno: result) }
    }

    /// What a new thread needs: its names and its body, handed over once.
    private final class Launch: @unchecked Sendable {
        // Sendable without a lock: `name` and `kernelName` are constants, and `body` is written
        // once, in `init`, before `pthread_create`, which makes every write before it visible
        // to the new thread (POSIX memory synchronisation); from then on only the new thread
        // touches it, once, in `run()`. If `pthread_create` fails there is no new thread, and
        // the starting thread alone releases the launch.
        let name: String
        let kernelName: String
        var body: (@Sendable () -> Void)?

        init(name: String, kernelName: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.kernelName = kernelName
            self.body = body
        }

        func run() {
            nameCurrentThread(name, kernelName: kernelName)
            setExactTimerSlack()
            ThreadActivity.startCurrent(name: name, kernelName: kernelName)
            body.take()!()
        }
    }

    #if canImport(Glibc) || canImport(Musl)
    // The C library declares these only under _GNU_SOURCE, which Swift's Glibc module does not set,
    // so they are looked up by name once.
    private typealias GetName = @convention(c) (pthread_t, UnsafeMutablePointer<CChar>, Int) -> Int32
    private static let getName: GetName? = symbol("pthread_getname_np")

    // prctl is variadic, which Swift cannot call; on the Linux ABIs Swift supports, integer
    // arguments of a variadic call are passed exactly as these five fixed ones.
    private typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
    private static let prctl: Prctl? = symbol("prctl")
    private static let setTimerSlackOption: Int32 = 29  // PR_SET_TIMERSLACK

    private static func symbol<Function>(_ name: String) -> Function? {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(address, to: Function.self)
    }
    #endif

    /// Names the calling thread: `name` for `Thread.current.name` and log records, `kernelName`
    /// (by default `name` cut to fit) for the kernel.
    static func nameCurrentThread(_ name: String, kernelName: String? = nil) {
        let kernelName = kernelName ?? Self.kernelName(for: name)
        #if canImport(Glibc) || canImport(Musl)
        // Foundation's `Thread.name` reads and writes the kernel's name here, so the kernel's form
        // is all it can hold.
        PThread.setKernelName(kernelName)
        #else
        Thread.current.name = name
        #endif
        ThreadName.current = name
    }

    /// Lets the kernel end the calling thread's timed waits as close to their deadline as it can.
    static func setExactTimerSlack() {
        #if canImport(Glibc) || canImport(Musl)
        _ = prctl?(setTimerSlackOption, 1, 0, 0, 0)
        #endif
    }

    /// The kernel's form of `name`: at most ``kernelNameLimit`` bytes, never a split character.
    ///
    /// With `suffix` (a pool thread's `" Thread7"`), the suffix is kept whole and the front is cut to
    /// whole characters, so threads of one pool stay apart in `top -H`: `"Downloads Thread12"`
    /// becomes `"Downlo Thread12"`, and a front with no character that fits is left out
    /// (`"Thread12"`). Without a suffix, a first character longer than the limit (a long emoji
    /// sequence) is cut between its Unicode scalars, so the name is never empty when `name` is not.
    static func kernelName(for name: String, keepingSuffix suffix: String = "") -> String {
        if suffix.isEmpty { return prefix(of: name, bytes: kernelNameLimit, orScalars: true) }
        let room = kernelNameLimit - suffix.utf8.count
        let front = room > 0 ? prefix(of: name, bytes: room, orScalars: false) : ""
        if !front.isEmpty { return front + suffix }
        return prefix(of: String(suffix.drop(while: { $0 == " " })), bytes: kernelNameLimit, orScalars: false)
    }

    /// The longest prefix of `text` within `limit` UTF-8 bytes made of whole characters; if none
    /// fits and `orScalars`, of whole Unicode scalars instead.
    private static func prefix(of text: String, bytes limit: Int, orScalars: Bool) -> String {
        var result = ""
        var bytes = 0
        for character in text {
            let size = character.utf8.count
            if bytes + size > limit { break }
            result.append(character)
            bytes += size
        }
        guard result.isEmpty, orScalars else { return result }
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            let size = String(scalar).utf8.count
            if bytes + size > limit { break }
            scalars.append(scalar)
            bytes += size
        }
        return String(scalars)
    }

    /// The calling thread's whole name: the one ThreadKit gave it, else Foundation's, else the kernel's.
    static func currentName() -> String {
        if let name = ThreadName.current { return name }
        if let name = Thread.current.name, !name.isEmpty { return name }
        if let name = kernelNameOfCurrentThread() { return name }
        return Thread.isMainThread ? "main" : "thread"
    }

    /// The name the kernel shows for the calling thread, else ``currentName()``.
    static func currentKernelName() -> String {
        kernelNameOfCurrentThread() ?? currentName()
    }

    private static func kernelNameOfCurrentThread() -> String? {
        #if canImport(Glibc) || canImport(Musl)
        var buffer = [CChar](repeating: 0, count: 64)
        if let getName = Self.getName, getName(pthread_self(), &buffer, buffer.count) == 0 {
            let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !name.isEmpty { return name }
        }
        #endif
        return nil
    }
}

/// Why a thread could not be started: `pthread_create`'s error number (`EAGAIN` when the system
/// lacks the resources or a limit was reached).
struct ThreadStartError: Error, Equatable {
    let errno: Int32
}

/// The whole name ThreadKit gave the calling thread, kept beside the kernel's cut one.
private enum ThreadName {
    private final class Box {
        let name: String
        init(_ name: String) { self.name = name }
    }

    private static let perThread = ThreadLocalObject<Box>()

    static var current: String? {
        get { perThread.current?.name }
        set { perThread.current = newValue.map(Box.init) }
    }
}
