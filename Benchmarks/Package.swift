// swift-tools-version:6.1
import PackageDescription

// Micro-benchmarks of PCastKit's hot paths with ordo-one's package-benchmark, in a package of their
// own so that the SDK's users never resolve the benchmark tooling. `make bench` runs them
// (`swift package benchmark`) and keeps a baseline; see README.md here.
let package = Package(
    name: "PCastKitBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        // The repository this folder is in; its identity is its folder's name, so it is named here.
        .package(name: "PCastKit", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "HotPaths",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "PCastProtocol", package: "PCastKit"),
                .product(name: "PCastRelay", package: "PCastKit"),
                .product(name: "SRTP", package: "PCastKit"),
                .product(name: "GStreamer", package: "PCastKit"),
            ],
            path: "Benchmarks/HotPaths",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
