import Foundation
import GStreamer

extension VideoFrame {
    /// The frame as a PNG image (RGB, or RGBA for formats with alpha), encoded by GStreamer's
    /// `pngenc` on a pipeline of its own (off Swift's cooperative pool).
    ///
    /// ```swift
    /// try await renderer.lastVideoFrameRendered().pngData().write(to: URL(fileURLWithPath: "still.png"))
    /// ```
    ///
    /// - Throws: ``MediaError/gstreamer(_:)`` when `pngenc` is missing or encoding fails.
    public func pngData() async throws(MediaError) -> Data {
        do {
            let rate = "0/1"
            let caps = "video/x-raw,format=\(format.rawValue),width=\(width),height=\(height),framerate=\(rate)"
            let pipeline = try Pipeline(description: "appsrc name=frame-in format=time caps=\"\(caps)\" ! videoconvert ! pngenc snapshot=true ! appsink name=png-out sync=false")
            let source = try pipeline.appSource(named: "frame-in")
            let sink = try pipeline.appSink(named: "png-out")
            let samples = sink.samples(limit: 2)
            try await pipeline.play(timeout: nil)
            let buffer = storage.shallowCopy()
            buffer.presentationTimestamp = .zero
            try await source.push(buffer)
            try source.endOfStream()
            var result: Data?
            for await sample in samples {
                result = Data(sample.buffer.bytes)
                break
            }
            try await pipeline.waitUntilEnd(timeout: .seconds(10))
            await pipeline.stop()
            guard let result else { throw GStreamerError.flow("pngenc produced no image") }
            return result
        } catch let error as GStreamerError {
            throw .gstreamer(error)
        } catch {
            throw .gstreamer(.flow("\(error)"))
        }
    }
}
