import Foundation
import GStreamer

/// The stock pipeline templates shipped with PCastMedia (`pipelines/` in the repository).
///
/// Looked up, in order: `$PCAST_PIPELINES_DIR`, the resource bundle beside the executable (an
/// installed `pcast`), the resource bundle in the build directory, and the source tree this
/// module was built from. A missing template is a typed error, never a crash.
///
/// ```swift
/// let text = try StockPipelines.template("user-media-video").render(["width": "640", ...])
/// ```
public enum StockPipelines {
    static let bundleName = "PCastKit_PCastMedia.resources"

    /// Directories searched for `NAME.pipeline`.
    public static var searchPath: [URL] {
        var directories: [URL] = []
        if let override = ProcessInfo.processInfo.environment["PCAST_PIPELINES_DIR"], !override.isEmpty {
            directories.append(URL(fileURLWithPath: override))
        }
        let executable = URL(fileURLWithPath: CommandLine.arguments.first ?? "").resolvingSymlinksInPath().deletingLastPathComponent()
        directories.append(executable.appendingPathComponent(bundleName).appendingPathComponent("Pipelines"))
        directories.append(Bundle.main.bundleURL.appendingPathComponent(bundleName).appendingPathComponent("Pipelines"))
        // Test bundles live in the build directory next to the resource bundle.
        for bundle in Bundle.allBundles {
            directories.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent(bundleName).appendingPathComponent("Pipelines"))
        }
        directories.append(URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Pipelines"))
        return directories
    }

    /// The template `name` (without `.pipeline`).
    public static func template(_ name: String) throws(GStreamerError) -> PipelineTemplate {
        for directory in searchPath {
            let url = directory.appendingPathComponent("\(name).pipeline")
            if FileManager.default.isReadableFile(atPath: url.path) {
                return try PipelineTemplate(contentsOf: url)
            }
        }
        throw .invalidTemplate(template: name, reason: "not found in \(searchPath.map(\.path).joined(separator: ", "))")
    }
}
