import Testing

/// A case of a parameterized test whose raw value is the sentence Swift Testing shows for it, so a
/// table of cases reads as a list of behaviours.
public protocol NamedTestCase: RawRepresentable, CustomTestStringConvertible where RawValue == String {}

extension NamedTestCase {
    public var testDescription: String { rawValue }
}
