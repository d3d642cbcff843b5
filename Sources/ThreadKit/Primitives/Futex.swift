import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A word one thread sleeps on until another posts it: on Linux a private futex, the cheapest
/// sleep and wake the kernel offers (GCD's and Go's threads park on one too).
///
/// The word is 0 while nothing is posted. ``reset()`` clears it, ``wait(until:)`` sleeps while it
/// is clear, ``post()`` sets it and wakes the sleeper with one system call. A post is never lost:
/// the kernel compares the word with 0 as it puts the thread to sleep, so a post that came first
/// keeps the thread awake, and one that comes after wakes it.
///
/// The word says only that something may have changed: the sleeper looks at the state it waits
/// for (under whatever lock guards it) and sleeps again if it was not for it. A late post, or the
/// rare wake-up the kernel gives for nothing, costs a look, never a wrong decision.
///
/// Elsewhere than Linux a mutex and a condition stand in for the futex: correct, not as cheap.
final class Futex: @unchecked Sendable {
    // Sendable: the word is an atomic that never moves (allocated once, freed in deinit); the
    // fallback's mutex and condition are made to be shared between threads.
    private let word: UnsafeMutablePointer<Atomic<UInt32>>
    #if !os(Linux)
    private let mutex = PThreadMutex()
    private let condition = MonotonicCondition()
    #endif

    init() {
        word = .allocate(capacity: 1)
        word.initialize(to: Atomic(0))
    }

    deinit {
        word.deinitialize(count: 1)
        word.deallocate()
    }

    /// Clears the word: the next ``wait(until:)`` sleeps until a ``post()`` after this.
    func reset() {
        word.pointee.store(0, ordering: .relaxed)
    }

    /// Whether the word is set: a ``post()`` came since the last ``reset()``.
    var isPosted: Bool {
        word.pointee.load(ordering: .acquiring) != 0
    }

    /// Sets the word and wakes the thread sleeping on it, if any.
    func post() {
        word.pointee.store(1, ordering: .releasing)
        #if os(Linux)
        _ = Self.futex(word, Self.wakePrivate, 1, nil)
        #else
        // The sleeper checks the word under the mutex: taking it here means the sleeper either
        // has not checked yet (it sees the word) or waits on the condition already (it is signalled).
        mutex.withLock {}
        condition.signal()
        #endif
    }

    /// Sleeps until the word is set or `deadline` passes.
    ///
    /// - Returns: Whether the word is set (`false`: the deadline came first).
    func wait(until deadline: MonotonicInstant) -> Bool {
        #if os(Linux)
        var absolute = deadline.timespecValue
        while !isPosted {
            guard Self.futex(word, Self.waitUntilPrivate, 0, &absolute) == -1 else { continue }
            switch errno {
            case ETIMEDOUT: return isPosted
            case EINTR, EAGAIN: continue  // a signal, or the word changed before the thread slept
            case let error: preconditionFailure("futex wait failed with errno \(error)")
            }
        }
        return true
        #else
        return mutex.withLock {
            while !isPosted {
                if !condition.wait(mutex, until: deadline) { return isPosted }
            }
            return true
        }
        #endif
    }

    #if os(Linux)
    /// `FUTEX_WAKE | FUTEX_PRIVATE_FLAG`.
    private static let wakePrivate: Int32 = 1 | 128
    /// `FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG`: an absolute deadline on `CLOCK_MONOTONIC`.
    private static let waitUntilPrivate: Int32 = 9 | 128
    /// `SYS_futex`, which Swift does not import (a macro of a macro): the kernel's number per
    /// architecture (the generic table's 98 for arm64 and riscv64).
    #if arch(x86_64)
    private static let futexNumber = 202
    #elseif arch(i386) || arch(arm)
    private static let futexNumber = 240
    #elseif arch(powerpc64) || arch(powerpc64le)
    private static let futexNumber = 221
    #elseif arch(s390x)
    private static let futexNumber = 238
    #else
    private static let futexNumber = 98
    #endif
    /// `FUTEX_BITSET_MATCH_ANY`, which the bitset operations require.
    private static let matchAny = UInt32.max

    /// `syscall(SYS_futex, word, op, value, timeout, nil, matchAny)`. The C `syscall` is variadic,
    /// which Swift cannot call; on the Linux ABIs Swift supports, integer and pointer arguments of
    /// a variadic call are passed exactly as these fixed ones, so it is looked up by name once.
    private static func futex(
        _ word: UnsafeMutablePointer<Atomic<UInt32>>, _ op: Int32, _ value: UInt32, _ timeout: UnsafePointer<timespec>?
    ) -> Int {
        syscall(futexNumber, UnsafeMutableRawPointer(word), op, value, timeout, nil, matchAny)
    }

    private typealias Syscall = @convention(c) (
        Int, UnsafeMutableRawPointer, Int32, UInt32, UnsafePointer<timespec>?, UnsafeRawPointer?, UInt32
    ) -> Int
    private static let syscall: Syscall = {
        guard let address = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syscall") else {
            preconditionFailure("the C library has no syscall()")
        }
        return unsafeBitCast(address, to: Syscall.self)
    }()
    #endif
}
