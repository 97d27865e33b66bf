import ArgumentParser
import Foundation
import PCastMedia

/// `pcast preview`: getUserMedia and a local renderer, as an app's preview does.
struct PreviewCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "preview",
        abstract: "Capture from a source and render it locally (a null sink when there is no display); optionally save a screenshot."
    )

    @Option(help: "Video source: test, null, screen, a device id from `pcast devices`, a URI, or a gst-launch description.")
    var source = "test"

    @Option(help: "Audio source (same forms, with test/null meaning a tone/silence); omit for no audio.")
    var audio: String?

    @Option(help: "Width in pixels (exact).")
    var width: Int?

    @Option(help: "Height in pixels (exact).")
    var height: Int?

    @Option(help: "Frame rate (exact).")
    var fps: Double?

    @Option(help: "Seconds to run (0: until Ctrl-C).")
    var seconds: Double = 5

    @Option(help: "Video sink: auto (a window; null when there is no display) or null.")
    var sink = "auto"

    @Option(help: "Write the last rendered frame as a PNG file here at the end.")
    var screenshot: String?

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        var options = UserMediaOptions()
        options.video.deviceId = nil
        switch Self.parse(source, kind: .video) {
        case .id(let id): options.video.deviceId = .exact(id)
        case .override(let override): options.video.source = override
        }
        if let width { options.video.width = .exact(width) }
        if let height { options.video.height = .exact(height) }
        if let fps { options.video.frameRate = .exact(fps) }
        if let audio {
            switch Self.parse(audio, kind: .audio) {
            case .id(let id): options.audio.deviceId = .exact(id)
            case .override(let override): options.audio.source = override
            }
        } else {
            options.audio.enabled = false
        }

        let media: UserMediaStream
        do {
            media = try await UserMedia.getUserMedia(options)
        } catch {
            FileHandle.standardError.write(Data("error: getUserMedia failed (\(error.status.rawValue)): \(error)\n".utf8))
            throw ExitCode(1)
        }
        let headless = ProcessInfo.processInfo.environment["DISPLAY"].map(\.isEmpty) ?? true
        let useNull = sink == "null" || headless
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: useNull, useNullAudioDevice: useNull))
        renderer.setVideoDisplayDimensionsChangedCallback { print("video: \($0)") }
        let status = await renderer.start()
        guard status == .ok else {
            await media.stop()
            FileHandle.standardError.write(Data("error: renderer: \(status)\n".utf8))
            throw ExitCode(1)
        }
        if let selection = media.videoSelection {
            print("source: \(selection.device.id) (\(selection.device.deviceType)), \(selection.width)x\(selection.height) @ \(selection.frameRate) fps, sink: \(useNull ? "null" : "window")")
        }
        if seconds > 0 {
            try? await Task.sleep(for: .seconds(seconds))
        } else {
            _ = await media.mediaStream.ended()
        }
        if let screenshot {
            let frame = try await firstRenderedFrame(renderer, within: .seconds(10))
            try await frame.pngData().write(to: URL(fileURLWithPath: screenshot))
            print("screenshot: \(screenshot) (\(frame.width)x\(frame.height))")
        }
        await renderer.stop()
        await media.stop()
    }

    enum Parsed { case id(String), override(MediaSourceOverride) }

    static func parse(_ text: String, kind: MediaType) -> Parsed {
        switch text {
        case "test": return .id(kind == .video ? SourceDevices.syntheticVideoId : SourceDevices.syntheticAudioId)
        case "null": return .id(kind == .video ? SourceDevices.nullVideoId : SourceDevices.nullAudioId)
        case "screen": return .override(.screen(display: nil))
        default:
            // `screen:<display>` (as `pcast devices` lists the screen): that X display's screen.
            if text.hasPrefix("screen:") { return .override(.screen(display: String(text.dropFirst("screen:".count)))) }
            if text.contains("://") { return .override(.uri(text)) }
            if text.contains(" ") || text.contains("!") { return .override(.pipeline(text)) }
            return .id(text)
        }
    }
}
