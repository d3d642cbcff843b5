extension Int64 {
    /// The sum, clamped to the range of `Int64`: a time far out stays far out instead of wrapping.
    package func addingSaturated(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// The value clamped to ±``SharedThrottle/microsecondLimit`` (±(2^53 − 1)), the integers a Lua
    /// number (a double) holds exactly.
    package var clampedToMicrosecondLimit: Int64 {
        Swift.min(Swift.max(self, -SharedThrottle.microsecondLimit), SharedThrottle.microsecondLimit)
    }

    /// The sum, clamped to ±``SharedThrottle/microsecondLimit``: the sum a Lua script computes in
    /// doubles, exactly, for operands within that range.
    package func addingClamped(_ other: Int64) -> Int64 {
        addingSaturated(other).clampedToMicrosecondLimit
    }
}

extension Duration {
    /// The duration in whole microseconds, rounded up (a gap or a pause is never shortened), clamped
    /// to the range of `Int64`.
    package var microsecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let fraction = attoseconds / 1_000_000_000_000
        let remainder = attoseconds % 1_000_000_000_000
        let (sum, sumOverflow) = whole.addingReportingOverflow(fraction + (remainder > 0 ? 1 : 0))
        return sumOverflow ? (seconds < 0 ? .min : .max) : sum
    }
}
