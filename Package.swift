// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "ThreadKit",
    products: [
        .library(name: "ThreadKit", targets: ["ThreadKit"]),
        .executable(name: "threadkit-demo", targets: ["threadkit-demo"]),
        .executable(name: "threadkit-bench", targets: ["threadkit-bench"]),
        .executable(name: "threadkit-soak", targets: ["threadkit-soak"]),
    ],
    targets: [
        .target(name: "ThreadKit"),
        .executableTarget(name: "threadkit-demo", dependencies: ["ThreadKit"]),
        .executableTarget(name: "threadkit-bench", dependencies: ["ThreadKit"]),
        .executableTarget(name: "threadkit-soak", dependencies: ["ThreadKit"]),
        .testTarget(name: "ThreadKitTests", dependencies: ["ThreadKit"]),
    ],
    swiftLanguageModes: [.v6]
)
