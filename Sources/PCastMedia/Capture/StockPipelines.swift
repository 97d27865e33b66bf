import Foundation
import GStreamer

/// The stock pipeline templates shipped with PCastMedia (`pipelines/` in the repository), built
/// into the code.
///
/// `$PCAST_PIPELINES_DIR` names a directory whose `NAME.pipeline` files are used instead (to try a
/// change without rebuilding). A missing template is a typed error, never a crash.
///
/// ```swift
/// let text = try StockPipelines.template("user-media-video").render(["width": "640", ...])
/// ```
public enum StockPipelines {
    /// The built-in templates by name; every `Pipelines/*.pipeline` file (a test checks).
    static let builtIn: [String: [UInt8]] = [
        "decode-audio": PackageResources.decode_audio_pipeline,
        "decode-video": PackageResources.decode_video_pipeline,
        "h264-loopback": PackageResources.h264_loopback_pipeline,
        "ingest": PackageResources.ingest_pipeline,
        "pcast-camera-to-platform": PackageResources.pcast_camera_to_platform_pipeline,
        "pcast-file-to-platform": PackageResources.pcast_file_to_platform_pipeline,
        "pcast-platform-to-display": PackageResources.pcast_platform_to_display_pipeline,
        "pcast-platform-to-file": PackageResources.pcast_platform_to_file_pipeline,
        "publish-audio": PackageResources.publish_audio_pipeline,
        "publish-video": PackageResources.publish_video_pipeline,
        "record-audio": PackageResources.record_audio_pipeline,
        "record-video": PackageResources.record_video_pipeline,
        "subscribe-audio": PackageResources.subscribe_audio_pipeline,
        "subscribe-video": PackageResources.subscribe_video_pipeline,
        "subscribe": PackageResources.subscribe_pipeline,
        "test-pattern": PackageResources.test_pattern_pipeline,
        "user-media-audio": PackageResources.user_media_audio_pipeline,
        "user-media-video": PackageResources.user_media_video_pipeline,
    ]

    /// The names of the built-in templates.
    public static var names: [String] { builtIn.keys.sorted() }

    /// The template `name` (without `.pipeline`).
    public static func template(_ name: String) throws(GStreamerError) -> PipelineTemplate {
        if let override = ProcessInfo.processInfo.environment["PCAST_PIPELINES_DIR"], !override.isEmpty {
            let url = URL(fileURLWithPath: override).appendingPathComponent("\(name).pipeline")
            if FileManager.default.isReadableFile(atPath: url.path) {
                return try PipelineTemplate(contentsOf: url)
            }
        }
        guard let bytes = builtIn[name] else {
            throw .invalidTemplate(template: name, reason: "no such stock pipeline (there are: \(names.joined(separator: ", ")))")
        }
        return try PipelineTemplate(text: String(decoding: bytes, as: UTF8.self), name: name)
    }
}
