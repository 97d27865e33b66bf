// swift-tools-version:6.1
import PackageDescription

// Layering (arrows point down only):
//   pcast (CLI) → GStreamer (safe Swift layer) → CGStreamerShim → CGStreamer (system library)
//   PCastMedia (media engine) → GStreamer, PCastProtocol
//   PCastRecording: fragmented-MP4 recordings (boxes, fragmenter, crash-safe file), Foundation only.
//   PCastProtocol: wire formats (digest tokens, RTP/RTCP), pure, no I/O.
//   PCastServer (platform: signaling, tokens, sessions, metrics) → PCastProtocol, PCastRelay (its control contract).
//   CSRTP: libsrtp2, used by the relay and reported by `pcast inspect`.
let package = Package(
    name: "PCastKit",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "GStreamer", targets: ["GStreamer"]),
        .library(name: "PCastProtocol", targets: ["PCastProtocol"]),
        .library(name: "PCastMedia", targets: ["PCastMedia"]),
        .library(name: "PCastRelay", targets: ["PCastRelay"]),
        .library(name: "PCast", targets: ["PCast"]),
        .library(name: "PCastServer", targets: ["PCastServer"]),
        .executable(name: "pcast", targets: ["pcast"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/adam-fowler/compress-nio", from: "1.5.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
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
            dependencies: ["CGStreamer"],
            // The pixel converters must be optimised in debug builds too (tests convert real frames).
            cSettings: [.unsafeFlags(["-O2"])]
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
        // Crash-safe recordings: fragmented MP4 boxes, fragmenter, recovery scanner, file writer.
        // Foundation only: no GStreamer.
        .target(name: "PCastRecording"),
        // Writes a recording slowly so the kill -9 test can interrupt it; not a product.
        .executableTarget(name: "pcast-recording-crash-writer", dependencies: ["PCastRecording"]),
        // Impaired networks for tests and benchmarks (this kernel has no netem): a seeded loss /
        // delay / jitter / bandwidth / outage model and a UDP proxy that applies it.
        .target(name: "PCastImpairment"),
        .target(
            name: "PCastMedia",
            dependencies: [
                "GStreamer",
                "PCastProtocol",
                "PCastRecording",
                .product(name: "Logging", package: "swift-log"),
            ],
            // The stock pipelines (`pipelines/` at the top is a link to them).
            resources: [.copy("Pipelines")]
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
        // The platform: signaling (HTTP + WebSocket), tokens, sessions, stream registry, metrics.
        .target(
            name: "PCastServer",
            dependencies: [
                "PCastProtocol",
                "PCastRelay",
                // Ingest runs the SDK's publisher in the platform (media engine → SDK → server).
                "PCast",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HummingbirdWSCompression", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The client SDK: PCast (signaling over a WebSocket, media over SRTP/UDP to the relay).
        .target(
            name: "PCast",
            dependencies: [
                "PCastMedia",
                "PCastProtocol",
                "GStreamer",
                "SRTP",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
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
                "PCast",
                "PCastImpairment",
                "PCastServer",
                "PCastRelay",
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
        // Device stand-ins (PulseAudio null sink, Xvfb) for the test targets; not a product.
        .target(
            name: "PCastTestSupport",
            dependencies: ["PCastImpairment"]
        ),
        .testTarget(
            name: "GStreamerTests",
            dependencies: ["GStreamer", "PCastTestSupport"]
        ),
        .testTarget(
            name: "PCastProtocolTests",
            dependencies: ["PCastProtocol", "PCastTestSupport", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "PCastRecordingTests",
            dependencies: ["PCastRecording", "pcast-recording-crash-writer", "PCastTestSupport"]
        ),
        .testTarget(
            name: "PCastImpairmentTests",
            dependencies: ["PCastImpairment"]
        ),
        .testTarget(
            name: "SRTPTests",
            dependencies: ["SRTP"]
        ),
        // Runs the built `pcast` binary, as a user would.
        .testTarget(
            name: "PCastCLITests",
            dependencies: ["PCastTestSupport"]
        ),
        .testTarget(
            name: "PCastServerTests",
            dependencies: [
                "PCastServer",
                "PCastProtocol",
                "PCastRelay",
                "PCastTestSupport",
                // Small NIO WebSocket and HTTP clients of our own: WSClient and async-http-client
                // would pull in a second BoringSSL (NIOSSL), and URLSession stalls on 401s here.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ]
        ),
        // The whole system on loopback: SDK → signaling → relay → SDK.
        .testTarget(
            name: "PCastTests",
            dependencies: ["PCast", "PCastServer", "PCastRelay", "PCastTestSupport", "PCastImpairment"]
        ),
        .testTarget(
            name: "PCastRelayTests",
            dependencies: ["PCastRelay", "PCastProtocol", "SRTP", "PCastTestSupport"]
        ),
        .testTarget(
            name: "PCastMediaTests",
            dependencies: ["PCastMedia", "GStreamer", "PCastProtocol", "PCastTestSupport"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
