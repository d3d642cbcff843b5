import Foundation
import Testing
@testable import ThreadKitURL
import SeededRandom

/// The Retry-After parser, with made-up times: RFC 9110's forms, erring on the side of waiting.
@Suite struct RetryAfterTests {
    /// Tue, 14 Nov 2023 22:13:20 GMT.
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let limit = Duration.seconds(120)

    func read(_ value: String, now: Date = Self.now, limit: Duration = Self.limit) -> RetryAfter.Reading {
        RetryAfter.read(value, now: now, limit: limit)
    }

    func isInvalid(_ value: String) -> Bool {
        if case .invalid = read(value) { return true }
        return false
    }

    @Test func delaySecondsAreWholeSeconds() {
        #expect(read("7") == .pause(.seconds(7)))
        #expect(read("0") == .pause(.zero))
        #expect(read("007") == .pause(.seconds(7)))
        #expect(read(" \t7 \t") == .pause(.seconds(7)))
        #expect(read("120") == .pause(.seconds(120)))
    }

    @Test func aDelayPastTheLimitOrTheClockIsCappedNeverNoPause() {
        #expect(read("121") == .pause(Self.limit))
        #expect(read("9223372036854775807") == .pause(Self.limit))
        #expect(read("9223372036854775808") == .pause(Self.limit))
        #expect(read("99999999999999999999") == .pause(Self.limit))
        #expect(read(String(repeating: "9", count: 1_000)) == .pause(Self.limit))
        #expect(read("99999999999999999999", limit: .seconds(Int64.max)) == .pause(.seconds(Int64.max)))
        #expect(read("5", limit: .zero) == .pause(.zero))
        #expect(read("5", limit: .milliseconds(300)) == .pause(.milliseconds(300)))
    }

    @Test func aDecimalIsRoundedUpToWholeSeconds() {
        #expect(read("1.5") == .pause(.seconds(2)))
        #expect(read("0.001") == .pause(.seconds(1)))
        #expect(read(".5") == .pause(.seconds(1)))
        #expect(read("2.") == .pause(.seconds(2)))
        #expect(read("1.0") == .pause(.seconds(1)))
        #expect(read("1.000") == .pause(.seconds(1)))
        #expect(read("0.0") == .pause(.zero))
        #expect(read("119.01") == .pause(.seconds(120)))
        #expect(read("120.5") == .pause(Self.limit))
        #expect(read("9223372036854775807.5") == .pause(Self.limit))
        #expect(read("99999999999999999999.5", limit: .seconds(Int64.max)) == .pause(.seconds(Int64.max)))
    }

    @Test func anythingElseIsInvalid() {
        for value in ["", " ", "\t", "-3", "+3", "-0", "1e3", "0x10", "1.2.3", ".", "..", "1 2", "5, 10", "soon",
                      "seven", "٣", "３", "1,5", "1_000", "1\u{00A0}", "NaN", "inf", "12a", "a12"] {
            #expect(isInvalid(value), "\(value.debugDescription)")
        }
    }

    @Test func theThreeHTTPDateFormsAreRead() {
        // Ten seconds after `now`, in each form.
        #expect(read("Tue, 14 Nov 2023 22:13:30 GMT") == .pause(.seconds(10)))
        #expect(read("Tuesday, 14-Nov-23 22:13:30 GMT") == .pause(.seconds(10)))
        #expect(read("Tue Nov 14 22:13:30 2023") == .pause(.seconds(10)))
        #expect(read("Sat Nov  4 22:13:30 2023") == .pause(.zero))   // a padded single-digit day, in the past
        #expect(read("Wed Nov 15 22:13:20 2023") == .pause(Self.limit))
        #expect(read("Wed Nov 15 22:13:20 2023", limit: .seconds(100_000)) == .pause(.seconds(86_400)))
        // Case and blanks do not matter.
        #expect(read("tue, 14 nov 2023 22:13:30 gmt") == .pause(.seconds(10)))
        #expect(read("TUE,14 NOV 2023  22:13:30 GMT ") == .pause(.seconds(10)))
        #expect(read("Tue, 14 Nov 2023 22:13:30 UTC") == .pause(.seconds(10)))
    }

    @Test func aDateNotInTheFutureIsNoPause() {
        #expect(read("Tue, 14 Nov 2023 22:13:20 GMT") == .pause(.zero))
        #expect(read("Tue, 14 Nov 2023 22:13:00 GMT") == .pause(.zero))
        #expect(read("Sun, 06 Nov 1994 08:49:37 GMT") == .pause(.zero))
        #expect(read("Thu, 01 Jan 1970 00:00:00 GMT") == .pause(.zero))
        #expect(read("Mon, 01 Jan 0001 00:00:00 GMT") == .pause(.zero))
    }

    @Test func aFarFutureDateIsCappedAndAFractionOfASecondRoundsUp() {
        #expect(read("Fri, 31 Dec 9999 23:59:59 GMT") == .pause(Self.limit))
        #expect(read("Fri, 31 Dec 9999 23:59:59 GMT", limit: .seconds(Int64.max)) == .pause(.seconds(253_402_300_799 - 1_700_000_000)))
        let later = Date(timeIntervalSince1970: 1_700_000_000.2501)
        #expect(read("Tue, 14 Nov 2023 22:13:30 GMT", now: later) == .pause(.milliseconds(9_750)))
        #expect(read("Tue, 14 Nov 2023 22:13:30 GMT", now: .distantPast) == .pause(Self.limit))
        #expect(read("Tue, 14 Nov 2023 22:13:30 GMT", now: .distantFuture) == .pause(.zero))
    }

    @Test func aTwoDigitYearIsTheLatestNotMoreThanFiftyYearsAhead() {
        #expect(HTTPDate.fullYear(23, now: Self.now) == 2023)
        #expect(HTTPDate.fullYear(73, now: Self.now) == 2073)
        #expect(HTTPDate.fullYear(74, now: Self.now) == 1974)
        #expect(HTTPDate.fullYear(94, now: Self.now) == 1994)
        #expect(HTTPDate.fullYear(0, now: Self.now) == 2000)
        #expect(read("Sunday, 06-Nov-94 08:49:37 GMT") == .pause(.zero))
        #expect(read("Monday, 06-Nov-73 08:49:37 GMT") == .pause(Self.limit))
        #expect(read("Tuesday, 14-Nov-2023 22:13:30 GMT") == .pause(.seconds(10)))
    }

    @Test func datesThatDoNotExistOrAreMalformedAreInvalid() {
        for value in [
            "Wed, 29 Feb 2023 00:00:00 GMT", "Tue, 31 Apr 2024 00:00:00 GMT", "Tue, 00 Nov 2023 22:13:30 GMT",
            "Tue, 32 Nov 2023 22:13:30 GMT", "Tue, 14 Nov 2023 24:00:00 GMT", "Tue, 14 Nov 2023 22:60:00 GMT",
            "Tue, 14 Nov 2023 22:13:61 GMT", "Tue, 14 Nov 2023 22:13 GMT", "Tue, 14 Nov 2023 22:13:30 PST",
            "Tue, 14 Nov 2023 22:13:30", "Tue, 14 Foo 2023 22:13:30 GMT", "Tue, 14 Nov 23 22:13:30 GMT",
            "Tue, 14 Nov 20233 22:13:30 GMT", "Tue, 14 Nov 2023 2:13:30 GMT", "Tue, 14 Nov 2023 22:13:30 GMT GMT",
            "1, 14 Nov 2023 22:13:30 GMT", "Tue, 14-Nov 22:13:30 GMT", "Tue, 14-Nov-3 22:13:30 GMT",
            "Tue Nov 14 22:13:30", "Tue Nov 14 22:13:30 23", "Tue, 14 Nov 2023 22:13:30 GMT\u{00E9}", "Tue, 1a Nov 2023 22:13:30 GMT",
        ] {
            #expect(isInvalid(value), "\(value)")
        }
        // A leap day, and a leap second, do exist.
        #expect(!isInvalid("Thu, 29 Feb 2024 00:00:00 GMT"))
        #expect(!isInvalid("Sat, 31 Dec 2016 23:59:60 GMT"))
    }

    @Test func everyProperPrefixOfADateIsInvalidOrAnotherDate() {
        for value in ["Tue, 14 Nov 2023 22:13:30 GMT", "Tuesday, 14-Nov-23 22:13:30 GMT", "Tue Nov 14 22:13:30 2023"] {
            let bytes = Array(value.utf8)
            for cut in 0..<bytes.count {
                let prefix = String(decoding: bytes[..<cut], as: UTF8.self)
                // Only a prefix that ends at a blank still holds the whole date.
                let whole = prefix.trimmingCharacters(in: .whitespaces) == value
                #expect(isInvalid(prefix) != whole, "\(prefix.debugDescription)")
            }
        }
    }

    @Test func dayCountsAgreeWithFoundationsGregorianCalendar() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "GMT"))
        var random = SplitMix64(seed: 19)
        for _ in 0..<2_000 {
            let year = 1_600 + Int(random.next() % 8_400)   // Foundation's calendar is Julian before 1582
            let month = 1 + Int(random.next() % 12)
            let day = 1 + Int(random.next() % UInt64(HTTPDate.daysIn(month: month, year: year)))
            let components = DateComponents(year: year, month: month, day: day, hour: 12)
            let date = try #require(calendar.date(from: components))
            let expected = Int((date.timeIntervalSince1970 / 86_400).rounded(.down))
            #expect(HTTPDate.daysSince1970(year: year, month: month, day: day) == expected, "\(year)-\(month)-\(day)")
            #expect(HTTPDate.civilYear(daysSince1970: expected) == year)
        }
    }

    /// Random bytes, and random edits of good values: the parser never traps, and every reading is
    /// a pause within the limit or invalid.
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func fuzzedValuesNeverTrapAndStayWithinTheLimit(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let alphabet = Array("0123456789 .,:-+\tGMTUCgmtucJanFebNovSunTue\u{00A0}é9".utf8) + [0, 0x80, 0xFF]
        let seeds = ["Tue, 14 Nov 2023 22:13:30 GMT", "Tuesday, 14-Nov-23 22:13:30 GMT", "Tue Nov 14 22:13:30 2023",
                     "120", "1.5", "99999999999999999999"].map { Array($0.utf8) }
        for _ in 0..<5_000 {
            var bytes: [UInt8]
            if random.next() % 2 == 0 {
                bytes = (0..<Int(random.next() % 40)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            } else {
                bytes = seeds[Int(random.next() % UInt64(seeds.count))]
                for _ in 0..<(1 + Int(random.next() % 3)) {
                    let place = bytes.isEmpty ? 0 : Int(random.next() % UInt64(bytes.count))
                    let byte = alphabet[Int(random.next() % UInt64(alphabet.count))]
                    switch random.next() % 3 {
                    case 0 where !bytes.isEmpty: bytes[place] = byte
                    case 1 where !bytes.isEmpty: bytes.remove(at: place)
                    default: bytes.insert(byte, at: place)
                    }
                }
            }
            let value = String(decoding: bytes, as: UTF8.self)
            let limit = Duration.seconds(Int64(random.next() % 200))
            let now = Date(timeIntervalSince1970: Double(random.next() % 4_000_000_000) - 1e9)
            switch RetryAfter.read(value, now: now, limit: limit) {
            case .pause(let pause): #expect(pause >= .zero && pause <= limit, "\(value.debugDescription)")
            case .invalid(let reason): #expect(!reason.isEmpty)
            }
        }
    }
}
