import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Reads a `Retry-After` field value (RFC 9110, section 10.2.3) as a pause: a pure parser that
/// takes the bytes and the time, and never traps, whatever the bytes.
///
/// It errs on the side of waiting, since a client that misreads the field hammers a server that
/// asked it to wait:
/// - delay-seconds of any length; one past `limit` (or past what the clock holds) is capped at `limit`;
/// - a decimal number (`1.5`, `.5`, `2.`), a common server mistake, is rounded up to whole seconds;
/// - an HTTP-date in any of the three forms RFC 9110 makes recipients accept (IMF-fixdate,
///   rfc850-date, asctime-date), names of days, months and the zone in any case, runs of blanks
///   taken as one; a date not in the future means no pause;
/// - anything else (a negative number, an exponent, two values, a date that does not exist) is
///   ``Reading/invalid(_:)``: the caller ignores and logs it.
enum RetryAfter {
    /// What a value asks for.
    enum Reading: Equatable, Sendable {
        /// Pause this long, at most the limit; `.zero` for no pause.
        case pause(Duration)
        /// Not a Retry-After value; says why, for the log.
        case invalid(String)
    }

    /// What `response` asks of its endpoint under `limits`, read at `now`: `nil` unless it is a 429
    /// or 503 with a `Retry-After` field and `limits` honour it.
    static func read(_ response: HTTPURLResponse, limits: URLDispatcher.EndpointLimits, now: Date) -> Reading? {
        guard limits.honorRetryAfter, response.statusCode == 429 || response.statusCode == 503,
              let value = response.value(forHTTPHeaderField: "Retry-After") else { return nil }
        return read(value, now: now, limit: limits.maxRetryAfter)
    }

    /// Reads `value` at `now`, capping the pause at `limit` (at least zero). A limit past
    /// `.seconds(Int64.max)`, already "never" on the monotonic clock, counts as that, so that the
    /// end of a pause computed from it cannot overflow.
    static func read(_ value: String, now: Date, limit: Duration) -> Reading {
        let limit = min(limit, .seconds(Int64.max))
        var bytes = Array(value.utf8)[...]
        while let first = bytes.first, isBlank(first) { bytes.removeFirst() }
        while let last = bytes.last, isBlank(last) { bytes.removeLast() }
        if bytes.isEmpty { return .invalid("an empty value") }
        if let seconds = delaySeconds(bytes) {
            return .pause(seconds.map { min(.seconds($0), limit) } ?? limit)
        }
        guard let date = HTTPDate(bytes, now: now) else {
            return .invalid("neither a number of seconds nor an HTTP date")
        }
        let delay = Double(date.secondsSince1970) - now.timeIntervalSince1970
        guard !(delay <= 0) else { return .pause(.zero) }
        // Whole milliseconds, rounded up: never shorter than asked for.
        let milliseconds = (delay * 1_000).rounded(.up)
        guard milliseconds < 1e18 else { return .pause(limit) }   // NaN and infinity included
        return .pause(min(.milliseconds(Int64(milliseconds)), limit))
    }

    /// Whole seconds, rounded up, of a value made of digits with at most one `.` among them;
    /// `.some(nil)` when they do not fit an `Int64`; `nil` when the value is not such a number.
    static func delaySeconds(_ bytes: ArraySlice<UInt8>) -> Int64?? {
        var whole: Int64? = 0
        var digits = 0
        var sawPoint = false
        var fractionIsZero = true
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                if sawPoint { return nil }
                sawPoint = true
                continue
            }
            guard let digit = digit(byte) else { return nil }
            digits += 1
            if sawPoint {
                if digit != 0 { fractionIsZero = false }
                continue
            }
            whole = whole.flatMap { value in
                let (times10, overflow) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflowAgain) = times10.addingReportingOverflow(Int64(digit))
                return overflow || overflowAgain ? nil : sum
            }
        }
        guard digits > 0 else { return nil }
        guard let whole else { return .some(nil) }
        if fractionIsZero { return .some(whole) }
        let (roundedUp, overflow) = whole.addingReportingOverflow(1)
        return .some(overflow ? nil : roundedUp)
    }

    static func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }

    static func digit(_ byte: UInt8) -> Int? {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") ? Int(byte - UInt8(ascii: "0")) : nil
    }
}

/// An HTTP-date (RFC 9110, section 5.6.7), in seconds since 1970 (UTC).
struct HTTPDate: Equatable, Sendable {
    let secondsSince1970: Int

    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    static let zones: Set<String> = ["gmt", "utc"]

    init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        secondsSince1970 = Self.daysSince1970(year: year, month: month, day: day) * 86_400 + hour * 3_600 + minute * 60 + second
    }

    /// Reads the three forms:
    /// - IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`;
    /// - rfc850-date `Sunday, 06-Nov-94 08:49:37 GMT`, whose two-digit year is the latest one not
    ///   more than 50 years after `now`'s year;
    /// - asctime-date `Sun Nov  6 08:49:37 1994`.
    ///
    /// `nil` for anything else, a date that does not exist included.
    init?(_ bytes: ArraySlice<UInt8>, now: Date) {
        // Fields split at blanks and the comma after the day's name.
        var fields: [String] = []
        var field: [UInt8] = []
        for byte in bytes {
            if RetryAfter.isBlank(byte) || byte == UInt8(ascii: ",") {
                if !field.isEmpty { fields.append(String(decoding: field, as: UTF8.self).lowercased()) }
                field.removeAll()
            } else {
                guard byte < 0x80 else { return nil }
                field.append(byte)
            }
        }
        if !field.isEmpty { fields.append(String(decoding: field, as: UTF8.self).lowercased()) }
        guard let dayName = fields.first, !dayName.isEmpty, dayName.allSatisfy({ $0.isLetter }) else { return nil }
        let day: Int?, month: Int?, year: Int?, time: (Int, Int, Int)?
        switch fields.count {
        case 6:  // IMF-fixdate: day-name, dd, mon, yyyy, time, GMT
            guard Self.zones.contains(fields[5]) else { return nil }
            (day, month, year, time) = (Self.number(fields[1], digits: 1...2), Self.month(fields[2]),
                                        Self.number(fields[3], digits: 4...4), Self.time(fields[4]))
        case 4:  // rfc850-date: day-name, dd-mon-yy, time, GMT
            guard Self.zones.contains(fields[3]) else { return nil }
            let parts = fields[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3 else { return nil }
            let shortYear = Self.number(parts[2], digits: 2...2)
            (day, month, time) = (Self.number(parts[0], digits: 1...2), Self.month(parts[1]), Self.time(fields[2]))
            year = shortYear.map { Self.fullYear($0, now: now) } ?? Self.number(parts[2], digits: 4...4)
        case 5:  // asctime-date: day-name, mon, d, time, yyyy
            (day, month, year, time) = (Self.number(fields[2], digits: 1...2), Self.month(fields[1]),
                                        Self.number(fields[4], digits: 4...4), Self.time(fields[3]))
        default:
            return nil
        }
        guard let day, let month, let year, let time,
              day >= 1, day <= Self.daysIn(month: month, year: year) else { return nil }
        self.init(year: year, month: month, day: day, hour: time.0, minute: time.1, second: time.2)
    }

    /// A number of `digits` ASCII digits.
    static func number(_ text: String, digits: ClosedRange<Int>) -> Int? {
        let bytes = Array(text.utf8)
        guard digits.contains(bytes.count) else { return nil }
        var value = 0
        for byte in bytes {
            guard let digit = RetryAfter.digit(byte) else { return nil }
            value = value * 10 + digit
        }
        return value
    }

    /// 1 for `jan` … 12 for `dec`.
    static func month(_ text: String) -> Int? {
        months.firstIndex(of: text).map { $0 + 1 }
    }

    /// `hh:mm:ss`, with a leap second allowed.
    static func time(_ text: String) -> (Int, Int, Int)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3,
              let hour = number(parts[0], digits: 2...2), let minute = number(parts[1], digits: 2...2),
              let second = number(parts[2], digits: 2...2),
              hour < 24, minute < 60, second <= 60 else { return nil }
        return (hour, minute, second)
    }

    /// The year of a two-digit year: the latest with those last digits not more than 50 years
    /// after `now`'s year (RFC 9110).
    static func fullYear(_ twoDigits: Int, now: Date) -> Int {
        let days = now.timeIntervalSince1970 / 86_400
        guard days.isFinite else { return 2_000 + twoDigits }
        let currentYear = civilYear(daysSince1970: Int(min(max(days, -1e9), 1e9).rounded(.down)))
        var year = currentYear - currentYear % 100 + twoDigits
        if year > currentYear + 50 { year -= 100 }
        return year
    }

    static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to the date, in the proleptic Gregorian calendar (H. Hinnant's
    /// `days_from_civil`).
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The year of the day `days` after 1970-01-01 (H. Hinnant's `civil_from_days`).
    static func civilYear(daysSince1970 days: Int) -> Int {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        return yearOfEra + era * 400 + (monthIndex >= 10 ? 1 : 0)
    }
}
