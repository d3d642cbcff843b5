// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "ThreadKit",
    products: [
        .library(name: "ThreadKit", targets: ["ThreadKit"]),
        .library(name: "ThreadKitURL", targets: ["ThreadKitURL"]),
        .library(name: "ThreadKitRedis", targets: ["ThreadKitRedis"]),
        .library(name: "LoopbackHTTPServer", targets: ["LoopbackHTTPServer"]),
        .executable(name: "threadkit-demo", targets: ["threadkit-demo"]),
        .executable(name: "threadkit-bench", targets: ["threadkit-bench"]),
        .executable(name: "threadkit-soak", targets: ["threadkit-soak"]),
    ],
    targets: [
        // Starting detached pthreads that report failure: shared by ThreadKit and the test server.
        .target(name: "ThreadLaunch"),
        .target(name: "ThreadKit", dependencies: ["ThreadLaunch"]),
        // URLDispatcher: imports FoundationNetworking on Linux, so the core never links it.
        .target(name: "ThreadKitURL", dependencies: ["ThreadKit"]),
        // Limits shared by a fleet, decided on Redis: its own RESP2 client (no package dependencies).
        .target(name: "ThreadKitRedis", dependencies: ["ThreadKit"]),
        // Processes sharing one limit on Redis, checked on Redis's clock, and the one redis-server
        // launcher: what the Redis tests, the benchmark's redis.* rows and the demo share (not a product).
        .target(name: "RedisFleet", dependencies: ["ThreadKit", "ThreadKitRedis"]),
        // The loopback HTTP/1.1 server that the tests, the demo and the benchmark share.
        .target(name: "LoopbackHTTPServer", dependencies: ["ThreadLaunch"]),
        // The seeded random source shared by the tests, the benchmark and the soak (not a product).
        .target(name: "SeededRandom"),
        // What the benchmark and the soak share: the command line, /proc readings, waiting (not a product).
        .target(name: "ToolHarness"),
        .executableTarget(
            name: "threadkit-demo", dependencies: ["ThreadKit", "ThreadKitURL", "ThreadKitRedis", "RedisFleet", "LoopbackHTTPServer"]),
        .executableTarget(
            name: "threadkit-bench",
            dependencies: ["ThreadKit", "ThreadKitURL", "ThreadKitRedis", "RedisFleet", "LoopbackHTTPServer", "SeededRandom", "ToolHarness"]),
        .executableTarget(name: "threadkit-soak", dependencies: ["ThreadKit", "SeededRandom", "ToolHarness"]),
        // What the two test targets share: counting and waiting across threads, kernel threads,
        // refused thread starts, exit-test checks (not a product).
        .target(name: "ThreadKitTestSupport", path: "Tests/ThreadKitTestSupport"),
        .testTarget(name: "ThreadKitTests", dependencies: ["ThreadKit", "SeededRandom", "ThreadKitTestSupport"]),
        .testTarget(name: "ThreadKitRedisTests", dependencies: ["ThreadKitRedis", "ThreadKit", "ThreadKitURL", "LoopbackHTTPServer", "SeededRandom", "ThreadKitTestSupport", "RedisFleet"]),
        .testTarget(name: "ThreadKitURLTests", dependencies: ["ThreadKit", "ThreadKitURL", "LoopbackHTTPServer", "SeededRandom", "ThreadKitTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
