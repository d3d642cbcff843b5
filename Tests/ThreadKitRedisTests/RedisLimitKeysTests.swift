import Testing
import ThreadKitRedis
import ThreadKitTestSupport

@Suite("RedisLimitKeys: every key of a limit under one hash tag")
struct RedisLimitKeysTests {
    @Test("every part's key carries the limit's hash tag as its first braces")
    func keys() {
        let keys = RedisLimitKeys("api.example.com")
        #expect(keys.hashTag == "{api.example.com}")
        #expect(keys.key("starts") == "threadkit:{api.example.com}:starts")
        #expect(keys.key("pause") == "threadkit:{api.example.com}:pause")
        // A part may hold braces: only the first {…} of a key is its tag.
        #expect(keys.key("x{y}") == "threadkit:{api.example.com}:x{y}")
        #expect(keys.description == "{api.example.com}")
    }

    @Test("a key with an opening brace stops, naming it", .exitTestOnOwnThreads)
    func openingBrace() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = RedisLimitKeys("a{b")
        }
        expectMessage(result, contains: ["RedisLimitKeys: key must not contain '{' or '}'", "\"a{b\""])
    }

    @Test("a key with a closing brace stops, naming it", .exitTestOnOwnThreads)
    func closingBrace() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = RedisLimitKeys("b}")
        }
        expectMessage(result, contains: ["RedisLimitKeys: key must not contain '{' or '}'", "\"b}\""])
    }

    @Test("an empty key stops, naming it", .exitTestOnOwnThreads)
    func emptyKey() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = RedisLimitKeys("")
        }
        expectMessage(result, contains: ["RedisLimitKeys: key must not be empty"])
    }
}
