import Foundation
import Testing
@testable import ThreadKit

@Suite("NamedThread")
struct NamedThreadTests {
    struct Observation: Sendable {
        var foundationName: String?
        var kernelName: String?
        var currentName: String
    }

    /// Starts a thread named `name` and returns what it saw of its own names.
    private func observe(name: String) async -> Observation? {
        let recorder = Recorder<Observation>()
        let done = Latch()
        try? NamedThread.start(name: name) {
            let id = KernelThreads.currentID()
            recorder.append(Observation(
                foundationName: Thread.current.name, kernelName: KernelThreads.name(ofThread: id),
                currentName: NamedThread.currentName()))
            done.countDown()
        }
        _ = await onNewThread { done.wait() }
        return recorder.values.first
    }

    @Test("A short name is the thread's name both in Foundation and in the kernel")
    func shortName() async throws {
        let observation = try #require(await observe(name: "NT short"))
        #expect(observation.kernelName == "NT short")
        #expect(observation.foundationName == "NT short")
        #expect(observation.currentName == "NT short")
    }

    @Test("A name of exactly 15 bytes is kept whole")
    func fifteenBytes() async throws {
        let name = "NT exactly 15 b"
        #expect(name.utf8.count == 15)
        let observation = try #require(await observe(name: name))
        #expect(observation.kernelName == name)
        #expect(observation.foundationName == name)
    }

    @Test(
        "A long name reaches the kernel cut to 15 bytes, never inside a character",
        arguments: [
            ("NT a much longer thread name", "NT a much longe"),
            ("NTabcdefghijkl€x", "NTabcdefghijkl"),  // € (3 bytes) would straddle byte 15
            ("NTöööööööööööö", "NTöööööö"),  // 2 + 6 × 2 = 14 bytes; the 7th ö would need 16
            ("NTabcdefghij€", "NTabcdefghij€"),  // exactly 15 bytes with the €
        ])
    func longName(name: String, expected: String) async throws {
        #expect(NamedThread.kernelName(for: name) == expected)
        #expect(expected.utf8.count <= 15)
        let observation = try #require(await observe(name: name))
        #expect(observation.kernelName == expected)
        // Foundation on Linux reads the name back from the kernel; elsewhere it keeps the whole name.
        #expect(observation.foundationName == name || observation.foundationName == expected)
        // Log records keep the whole name everywhere.
        #expect(observation.currentName == name)
    }

    @Test("A started thread asks for 1 ns of timer slack instead of Linux's default 50 µs")
    func exactTimerSlack() async throws {
        let recorder = Recorder<String>()
        let done = Latch()
        try NamedThread.start(name: "NT slack") {
            // /proc/<tid> answers for a thread although only processes are listed there.
            let slack = try? String(contentsOfFile: "/proc/\(KernelThreads.currentID())/timerslack_ns", encoding: .utf8)
            recorder.append(slack?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "unreadable")
            done.countDown()
        }
        _ = await onNewThread { done.wait() }
        #expect(recorder.values == ["1"])
    }

    @Test("kernelName(for:) keeps whole characters, even multi-scalar ones, within 15 bytes")
    func kernelNameCut() {
        #expect(NamedThread.kernelNameLimit == 15)
        #expect(NamedThread.kernelName(for: "") == "")
        #expect(NamedThread.kernelName(for: "short") == "short")
        #expect(NamedThread.kernelName(for: "123456789012345") == "123456789012345")
        #expect(NamedThread.kernelName(for: "1234567890123456") == "123456789012345")
        // "é" written as e + U+0301 is one character of 3 bytes: 13 + 3 = 16, so it goes whole.
        #expect(NamedThread.kernelName(for: "abcdefghijklme\u{301}") == "abcdefghijklm")
        #expect(NamedThread.kernelName(for: "abcdefghijkle\u{301}") == "abcdefghijkle\u{301}")
        // A 4-byte emoji after 12 bytes does not fit; after 11 it does.
        #expect(NamedThread.kernelName(for: "abcdefghijkl🧵") == "abcdefghijkl")
        #expect(NamedThread.kernelName(for: "abcdefghijk🧵x") == "abcdefghijk🧵")
        for name in ["Pööl Thread1234", "€€€€€€€€", "🧵🧵🧵🧵🧵", "x€€€€€"] {
            let cut = NamedThread.kernelName(for: name)
            #expect(cut.utf8.count <= 15)
            #expect(name.hasPrefix(cut))
            // Maximal: the next character would not have fitted.
            if cut.count < name.count {
                let next = name[name.index(name.startIndex, offsetBy: cut.count)]
                #expect(cut.utf8.count + next.utf8.count > 15)
            }
        }
    }
}

@Suite("NamedThread kernel names of pool threads")
struct NamedThreadSuffixTests {
    @Test("A pool thread's kernel name keeps its number whole and cuts the pool's name to fit")
    func suffixKept() {
        #expect(NamedThread.kernelName(for: "Downloads", keepingSuffix: " Thread1") == "Downloa Thread1")
        #expect(NamedThread.kernelName(for: "Downloads", keepingSuffix: " Thread12") == "Downlo Thread12")
        #expect(NamedThread.kernelName(for: "Images", keepingSuffix: " Thread1") == "Images Thread1")
        #expect(NamedThread.kernelName(for: "Pöööööl", keepingSuffix: " Thread1") == "Pööö Thread1")
        #expect(NamedThread.kernelName(for: "ab€", keepingSuffix: " Thread12345") == "ab Thread12345")
        // No character of the pool's name fits: the number alone.
        #expect(NamedThread.kernelName(for: "€€", keepingSuffix: " Thread1234567") == "Thread1234567")
        #expect(NamedThread.kernelName(for: "👨‍👩‍👧‍👦", keepingSuffix: " Thread1") == "Thread1")
        for number in [1, 9, 10, 999, 123_456] {
            let name = NamedThread.kernelName(for: "A rather long pool name", keepingSuffix: " Thread\(number)")
            #expect(name.utf8.count <= 15)
            #expect(name.hasSuffix(" Thread\(number)"))
        }
    }

    @Test("A name whose first character is longer than 15 bytes is cut between scalars, never emptied")
    func hugeFirstCharacter() {
        let family = "👨‍👩‍👧‍👦"
        let cut = NamedThread.kernelName(for: family)
        #expect(!cut.isEmpty)
        #expect(cut.utf8.count <= 15)
        #expect(family.unicodeScalars.starts(with: cut.unicodeScalars))
    }
}
