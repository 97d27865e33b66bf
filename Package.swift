// swift-tools-version:6.1
import PackageDescription

// Layering (arrows point down only):
//   pcast (the shipped CLI, Sources/PCastCLI) → PCastNode, PCast, …; no benchmark, no test stand-in
//   PCastNode (composition: LocalPlatform, PlatformNode) → PCastServer, PCastRelay, PCastMediaServices
//   PCastServer (control plane: signaling, tokens, sessions, streams, rooms, chat, HTTP, store)
//       → PCastContracts, PCastProtocol only: no media engine, no concrete relay
//   PCastMediaServices (ingest, RTMP push, recording) → PCast (the SDK), PCastContracts
//   PCastRelay (SFU) → PCastContracts, PCastProtocol, SRTP, DTLS
//   PCastContracts: what the control plane asks of the relay and the media services (RelayControl,
//       IngestControl, RecordingControl, MediaServices, IngestURIPolicy), → PCastProtocol only; no I/O
//       (the policy is handed name resolution and file paths by PCastMediaServices)
//   PCast (client SDK) → PCastMedia (media engine) → GStreamer (safe Swift layer) → CGStreamerShim → CGStreamer
//   pcast-bench (not a product: the benchmarks' command line) → PCastBenchmarks
//   PCastBenchmarks (not a product: what `pcast-bench` runs) → PCast, PCastNode, PCastServer, PCastRelay, PCastMedia, PCastTestSupport
//   PCastTLS (the listeners' reloadable certificate store) → PCastContracts, NIOSSL
//   PCastHTTPClient (one HTTP/1.1 request over NIO, TLS handler of the caller's) → NIO, NIOSSL only;
//       used by PCast and PCastServer where a private CA must be trusted
//   PCastRecording: fragmented-MP4 recordings (boxes, fragmenter, crash-safe file), Foundation only.
//   PCastProtocol: wire formats (digest tokens, RTP/RTCP, signaling, RTMP), pure, no I/O.
//   CSRTP: libsrtp2, used by the relay and reported by `pcast inspect`.
//   SRTP → CSRTP, CSRTPCipher (outbound AES-GCM RTP over OpenSSL's EVP: the relay's fan-out path).
//   DTLS (DTLS-SRTP over the system's OpenSSL 3, through CDTLSShim) → SRTP; used by the relay.
//   PCastGstPlugin (the GStreamer plugin libgstpcast.so: pcastsink, pcastsrc) → PCast, PCastMedia, GStreamer;
//       its GObject boilerplate is C (CPCastGstPlugin), reached through a seam of @_cdecl functions.
/// Every `Sources/PCastMedia/Pipelines/*.pipeline`, named here (a listing of the folder would be
/// cached with the manifest and miss a new file); StockPipelinesTests checks the list is whole.
let stockPipelines = [
    "decode-audio.pipeline",
    "decode-video.pipeline",
    "h264-loopback.pipeline",
    "ingest.pipeline",
    "pcast-camera-to-platform.pipeline",
    "pcast-file-to-platform.pipeline",
    "pcast-platform-to-display.pipeline",
    "pcast-platform-to-file.pipeline",
    "publish-audio.pipeline",
    "publish-video.pipeline",
    "record-audio.pipeline",
    "record-video.pipeline",
    "subscribe-audio.pipeline",
    "subscribe-video.pipeline",
    "subscribe.pipeline",
    "test-pattern.pipeline",
    "user-media-audio.pipeline",
    "user-media-video.pipeline",
]

let package = Package(
    name: "PCastKit",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "GStreamer", targets: ["GStreamer"]),
        .library(name: "PCastProtocol", targets: ["PCastProtocol"]),
        .library(name: "PCastMedia", targets: ["PCastMedia"]),
        .library(name: "PCastRelay", targets: ["PCastRelay"]),
        // SRTP sessions over the system's libsrtp2 (what the relay and the SDK protect media with).
        .library(name: "SRTP", targets: ["SRTP"]),
        .library(name: "PCast", targets: ["PCast"]),
        .library(name: "PCastContracts", targets: ["PCastContracts"]),
        .library(name: "PCastServer", targets: ["PCastServer"]),
        .library(name: "PCastMediaServices", targets: ["PCastMediaServices"]),
        .library(name: "PCastNode", targets: ["PCastNode"]),
        .executable(name: "pcast", targets: ["pcast"]),
        // The GStreamer plugin: SwiftPM names it libgstpcast.so, and GStreamer finds its entry
        // point (gst_plugin_pcast_get_desc) from that file name. `make plugin` builds it.
        .library(name: "gstpcast", type: .dynamic, targets: ["PCastGstPlugin"]),
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
        // The shared store of a cluster of nodes (`pcast serve --database postgres://…`).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // TLS for HTTPS/WSS, RTMPS and the SDK's wss:// (already built for postgres-nio).
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // `swift package generate-documentation` (make docs): the DocC catalog of each product library.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
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
        // C for what Swift cannot import from GStreamer (function-like macros and the like).
        .target(
            name: "CGStreamerShim",
            dependencies: ["CGStreamer"]
        ),
        // The AV1 RTP payloader and depayloader elements (GStreamer 1.22 has neither): the GObject
        // subclasses of GStreamer's RTP base classes, in C; the payload format is PCastProtocol's.
        .target(
            name: "CAV1RTP",
            dependencies: ["CGStreamer"]
        ),
        // Our 4:2:0 YUV <-> BGRA converters: plain C, no GStreamer, no unsafe flags (see its header).
        .target(name: "CPixelConverter"),
        .target(
            name: "GStreamer",
            dependencies: [
                "CGStreamer",
                "CGStreamerShim",
                "CPixelConverter",
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
                // The AV1 elements' function table (AV1Elements.swift): C types at that seam only.
                "CAV1RTP",
                "CGStreamer",
                "PCastProtocol",
                "PCastRecording",
                .product(name: "Logging", package: "swift-log"),
            ],
            // The stock pipelines (`pipelines/` at the top is a link to them), built into the code:
            // the SDK finds them wherever it runs (an installed pcast, a GStreamer plugin inside
            // gst-launch-1.0 or Python), with no resource bundle to carry along.
            resources: stockPipelines.map { .embedInCode("Pipelines/\($0)") }
        ),
        // What the control plane asks of the relay and of the media services: the seam between
        // the control plane and the media plane (no implementation, no I/O).
        .target(
            name: "PCastContracts",
            dependencies: ["PCastProtocol"]
        ),
        // The media relay (SFU): one UDP port, SRTP per flow, forwards without decoding.
        .target(
            name: "PCastRelay",
            dependencies: [
                "PCastContracts",
                "PCastProtocol",
                "SRTP",
                "DTLS",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The server side of TLS (HTTPS/WSS, RTMPS): the certificate store both the control plane
        // and the media services serve from, reloadable. NIOSSL only.
        .target(
            name: "PCastTLS",
            dependencies: [
                "PCastContracts",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // One HTTP/1.1 request over NIO with a TLS handler of the caller's: the SDK's and the
        // platform's requests that must trust a private CA (URLSession on Linux cannot be told one).
        .target(
            name: "PCastHTTPClient",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // The control plane: signaling (HTTP + WebSocket), tokens, sessions, streams, rooms, chat,
        // metrics, the room store. Reaches the relay and the media services through contracts only.
        .target(
            name: "PCastServer",
            dependencies: [
                "PCastContracts",
                "PCastProtocol",
                "PCastTLS",
                "PCastHTTPClient",
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
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            // The browser page `pcast serve` answers at `/`: plain HTML in the repository, in the binary.
            resources: [.embedInCode("Page/index.html")]
        ),
        // The media services: ingest of remote sources, the RTMP push endpoint, the recorder. They
        // run the SDK's publishers and recorders on a platform session of their own.
        .target(
            name: "PCastMediaServices",
            dependencies: [
                "PCast",
                "PCastMedia",
                "PCastRecording",
                "PCastContracts",
                "PCastProtocol",
                "PCastTLS",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // One platform node: control plane + relay + media services wired together (`pcast serve`,
        // LocalPlatform).
        .target(
            name: "PCastNode",
            dependencies: [
                "PCastServer",
                "PCastRelay",
                "PCastMediaServices",
                "PCastContracts",
                "PCastProtocol",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The client SDK: PCast (signaling over a WebSocket, media over SRTP/UDP to the relay).
        .target(
            name: "PCast",
            dependencies: [
                "PCastMedia",
                "PCastProtocol",
                "PCastHTTPClient",
                "GStreamer",
                "SRTP",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            // Every import is internal unless a file says `public import`: what the SDK exposes is
            // deliberate (Exports.swift re-exports what its users type).
            swiftSettings: [.enableUpcomingFeature("InternalImportsByDefault")]
        ),
        // SRTP AEAD_AES_128_GCM sealing over the system's OpenSSL 3 EVP: the relay's fan-out path
        // (see its header for why it is C).
        .target(
            name: "CSRTPCipher",
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        // Safe Swift face of libsrtp2, with outbound AES-GCM RTP sealed by CSRTPCipher.
        .target(
            name: "SRTP",
            dependencies: ["CSRTP", "CSRTPCipher"]
        ),
        // What Swift cannot do with the system's OpenSSL 3 (function-like macros, a datagram BIO,
        // a verify callback, a variadic key generator); see its header.
        .target(
            name: "CDTLSShim",
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]
        ),
        // DTLS-SRTP server endpoints (RFC 5764) over the system's OpenSSL 3: the relay's WebRTC
        // handshake, keys handed to SRTP.
        .target(
            name: "DTLS",
            dependencies: ["CDTLSShim", "SRTP"]
        ),
        // The plugin's GObject boilerplate (types, properties, pads, state changes) in C.
        .target(
            name: "CPCastGstPlugin",
            dependencies: ["CGStreamer"]
        ),
        .target(
            name: "PCastGstPlugin",
            dependencies: ["CGStreamer", "CPCastGstPlugin", "GStreamer", "PCast", "PCastMedia"]
        ),
        // Its folder is not `Sources/pcast`: that differs from the SDK's `Sources/PCast` only by
        // case, and the two collide on case-insensitive file systems.
        .executableTarget(
            name: "pcast",
            dependencies: [
                "PCast",
                "PCastImpairment",
                "PCastNode",
                "PCastServer",
                "PCastContracts",
                "PCastRelay",
                "GStreamer",
                "PCastProtocol",
                "PCastMedia",
                "SRTP",
                "CSRTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/PCastCLI"
        ),
        // `pcast-bench`: the benchmarks' command line (argument parsing, JSON and markdown out),
        // what `make bench` and `make soak` run. Not a product: the measuring code is in
        // PCastBenchmarks, which links the test stand-ins; the shipped `pcast` links neither.
        .executableTarget(
            name: "pcast-bench",
            dependencies: [
                "PCastBenchmarks",
                "PCast",
                "PCastMedia",
                "PCastNode",
                "PCastServer",
                "PCastRelay",
                "PCastProtocol",
                "PCastImpairment",
                "GStreamer",
                "PCastTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            path: "Sources/PCastBenchCLI"
        ),
        // The benchmarks `pcast-bench` and `pcast-bench soak` run (fan-out, end to end, rooms, frame hooks,
        // capture → encode, ingest, echo loop, publish cycles); not a product: product libraries
        // hold product code only. Reaches engine internals through `package` access.
        .target(
            name: "PCastBenchmarks",
            dependencies: [
                "PCast",
                // The platform benchmarks start the embedded platform (LocalPlatform) with TLS and TURN.
                "PCastNode",
                "PCastServer",
                "PCastMedia",
                "PCastRelay",
                "PCastContracts",
                "PCastProtocol",
                "SRTP",
                "DTLS",
                // The TLS listener benchmark's client: the system's OpenSSL 3, as the DTLS layer reaches it.
                "CDTLSShim",
                "GStreamer",
                "CSRTP",
                "PCastTestSupport",
                "PCastImpairment",
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Fuzz harnesses for every parser that takes bytes from the network or a torn file, and the
        // libFuzzer driver `make fuzz` builds with -sanitize=fuzzer (a normal build seeds and replays).
        .target(name: "PCastFuzzing", dependencies: ["PCastProtocol", "PCastRecording"]),
        .executableTarget(name: "pcast-fuzz", dependencies: ["PCastFuzzing"]),
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
            dependencies: ["PCastProtocol", "PCastTestSupport", "PCastFuzzing", "PCastImpairment", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "PCastRecordingTests",
            dependencies: ["PCastRecording", "pcast-recording-crash-writer", "PCastTestSupport", "PCastProtocol"]
        ),
        .testTarget(
            name: "PCastImpairmentTests",
            dependencies: ["PCastImpairment"]
        ),
        .testTarget(
            name: "SRTPTests",
            dependencies: ["SRTP", "DTLS", "PCastTestSupport"]
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
                "PCastContracts",
                "PCastProtocol",
                "PCastRelay",
                "PCastTLS",
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
            dependencies: ["PCast", "PCastNode", "PCastServer", "PCastContracts", "PCastRelay", "PCastTestSupport", "PCastImpairment", "PCastBenchmarks",
                           "PCastMediaServices"]
        ),
        .testTarget(
            name: "PCastRelayTests",
            dependencies: ["PCastRelay", "PCastContracts", "PCastProtocol", "SRTP", "PCastTestSupport", "PCastBenchmarks"]
        ),
        .testTarget(
            name: "PCastMediaTests",
            dependencies: ["PCastMedia", "GStreamer", "PCastProtocol", "PCastTestSupport", "PCastBenchmarks", "PCastImpairment", "PCastRecording"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
