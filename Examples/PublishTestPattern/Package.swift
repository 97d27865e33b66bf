// swift-tools-version:6.1
import PackageDescription

// An application that uses PCastKit the way any other package would: through a git URL and a
// version. `scripts/example.sh` (run by `make test`) points PCASTKIT_GIT_URL at a tagged clone of
// the working tree; without it, the git repository this example sits in (its tags).
let pcastKit = Context.environment["PCASTKIT_GIT_URL"] ?? "file://\(Context.packageDirectory)/../.."

let package = Package(
    name: "PublishTestPattern",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: pcastKit, from: "0.1.0"),
    ],
    targets: [
        .executableTarget(
            name: "PublishTestPattern",
            dependencies: [
                .product(name: "PCast", package: "PCastKit"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
