// swift-tools-version:6.1
import PackageDescription

// Layering (arrows point down only):
//   pcast (CLI) → GStreamer (safe Swift layer) → CGStreamerShim → CGStreamer (system library)
//   PCastMedia (media engine) → GStreamer, PCastProtocol
//   PCastProtocol: wire formats (digest tokens, RTP/RTCP), pure, no I/O.
//   CSRTP: libsrtp2, used by the relay and reported by `pcast inspect`.
let package = Package(
    name: "PCastKit",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "GStreamer", targets: ["GStreamer"]),
        .library(name: "PCastProtocol", targets: ["PCastProtocol"]),
        .library(name: "PCastMedia", targets: ["PCastMedia"]),
        .library(name: "PCastRelay", targets: ["PCastRelay"]),
        .executable(name: "pcast", targets: ["pcast"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    ],
    targets: [
        .systemLibrary(
            name: "CGStreamer",
            pkgConfig: "gstreamer-1.0",
            providers: [.apt(["libgstreamer1.0-dev", "libgstreamer-plugins-base1.0-dev"])]
        ),
        .systemLibrary(
            name: "CSRTP",
            pkgConfig: "libsrtp2",
            providers: [.apt(["libsrtp2-dev"])]
        ),
        .target(
            name: "CGStreamerShim",
            dependencies: ["CGStreamer"]
        ),
        .target(
            name: "GStreamer",
            dependencies: [
                "CGStreamer",
                "CGStreamerShim",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "PCastProtocol",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")]
        ),
        .target(
            name: "PCastMedia",
            dependencies: [
                "GStreamer",
                "PCastProtocol",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The media relay (SFU): one UDP port, SRTP per flow, forwards without decoding.
        .target(
            name: "PCastRelay",
            dependencies: [
                "PCastProtocol",
                "SRTP",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Safe Swift face of libsrtp2.
        .target(
            name: "SRTP",
            dependencies: ["CSRTP"]
        ),
        .executableTarget(
            name: "pcast",
            dependencies: [
                "GStreamer",
                "PCastProtocol",
                "PCastMedia",
                "SRTP",
                "CSRTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ]
        ),
        .testTarget(
            name: "GStreamerTests",
            dependencies: ["GStreamer"]
        ),
        .testTarget(
            name: "PCastProtocolTests",
            dependencies: ["PCastProtocol", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "SRTPTests",
            dependencies: ["SRTP"]
        ),
        // Runs the built `pcast` binary, as a user would.
        .testTarget(
            name: "PCastCLITests",
            dependencies: []
        ),
        .testTarget(
            name: "PCastRelayTests",
            dependencies: ["PCastRelay", "PCastProtocol", "SRTP"]
        ),
        .testTarget(
            name: "PCastMediaTests",
            dependencies: ["PCastMedia", "GStreamer"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
