import Testing
@testable import ThreadKit
