import Foundation
import GStreamer
@testable import PCastMedia
import Synchronization
import Testing

@Suite("MediaFeed: frames the application pushes as a stream's source")
struct MediaFeedTests {
    @Test("pushed 320×240 frames, stamped with a counter, reach the stream's renderer in order; pushed audio reaches its track; an ended feed takes no more frames")
    func framesReachTheStream() async throws {
        let video = MediaFeed(), audio = MediaFeed()
        #expect(!video.isAttached)
        var options = UserMediaOptions()
        options.video.source = .feed(video)
        options.video.width = .exact(320)
        options.video.height = .exact(240)
        options.video.frameRate = .exact(30)
        options.audio.source = .feed(audio)
        // The producer runs before getUserMedia returns: it waits for the first frame.
        let pushed = Atomic<Int>(0)
        let producer = Task.detached {
            var counter: UInt32 = 0
            while !Task.isCancelled {
                var frame = try VideoFrame(format: .i420, width: 320, height: 240)
                counter += 1
                FrameStamp.paint(counter, into: &frame)
                if video.push(frame) { pushed.add(1, ordering: .relaxed) }
                audio.push(try AudioFrame(silenceOf: 1_600, channels: 2, sampleRate: 48_000))
                try await Task.sleep(for: .milliseconds(33))
            }
        }
        defer { producer.cancel() }
        let media = try await UserMedia.getUserMedia(options)
        #expect(video.isAttached && audio.isAttached)
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        #expect(await renderer.start() == .ok)
        let seen = Mutex<[UInt32]>([]), sizes = Mutex<Set<String>>([]), audioFrames = Atomic<Int>(0)
        try renderer.setFrameReadyCallback(media.mediaStream.getVideoTracks()[0]) { notification in
            guard case .video(let frame)? = try? notification.read() else { return }
            sizes.withLock { _ = $0.insert("\(frame.width)×\(frame.height)") }
            if let value = FrameStamp.read(frame) { seen.withLock { $0.append(value) } }
        }
        try renderer.setFrameReadyCallback(media.mediaStream.getAudioTracks()[0]) { notification in
            if case .audio? = try? notification.read() { audioFrames.add(1, ordering: .relaxed) }
        }
        try await Task.sleep(for: .seconds(2))
        let values = seen.withLock { $0 }
        #expect(values.count >= 30, "\(values.count) stamped frames rendered of \(pushed.load(ordering: .relaxed)) pushed")
        #expect(values == values.sorted(), "frames out of order")
        #expect(sizes.withLock { $0 } == ["320×240"])
        #expect(audioFrames.load(ordering: .relaxed) > 10)
        producer.cancel()
        video.end()
        audio.end()
        #expect(!video.push(try VideoFrame(format: .i420, width: 320, height: 240)), "an ended feed took a frame")
        await renderer.stop()
        await media.stop()
        #expect(!video.isAttached)
    }
}
