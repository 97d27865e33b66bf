// swift-tools-version:6.1
import PackageDescription

// The Swift examples: applications that use PCastKit the way any other package would, through a
// git URL and a version. One package for both, so the dependencies build once. `scripts/examples.sh`
// (run by `make test`) points PCASTKIT_GIT_URL at a tagged clone of the working tree; without it,
// the git repository these examples sit in (its tags).
let pcastKit = Context.environment["PCASTKIT_GIT_URL"] ?? "file://\(Context.packageDirectory)/.."

let package = Package(
    name: "PCastKitExamples",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: pcastKit, from: "0.1.0"),
    ],
    targets: [
        // Publishes a test pattern and watches it back through the platform.
        .executableTarget(
            name: "PublishTestPattern",
            dependencies: [.product(name: "PCast", package: "PCastKit")],
            path: "PublishTestPattern",
            exclude: ["README.md"]
        ),
        // A viewer that renders a stream into a window of its own on the X display.
        .executableTarget(
            name: "WatchInWindow",
            dependencies: [.product(name: "PCast", package: "PCastKit")],
            path: "WatchInWindow",
            exclude: ["README.md"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
