import Foundation
@testable import PCast
import PCastNode
import PCastServer
import PCastTestSupport
import Testing

extension OneAtATime {
    @Suite("A source that fails mid-publish", .serialized)
    struct SourceFailurePublishTests {
        @Test("a published source that fails after a viewer has decoded frames ends the stream for the viewer as failed")
        func failedSourceEndsTheStreamAsFailed() async throws {
            let platform = try await LocalPlatform.start()
            let publisherClient = try await client(platform)
            var options = UserMediaOptions()
            // About 4 s of frames at the source's 30 fps, then an error.
            options.video.source = .pipeline("videotestsrc is-live=true ! video/x-raw,framerate=30/1 ! identity error-after=120")
            options.video.width = .exact(320)
            options.video.height = .exact(240)
            options.video.frameRate = .exact(30)
            options.audio.enabled = false
            let media = try await UserMedia.getUserMedia(options)
            let publisher = try await publisherClient.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let (viewer, stream, renderer, frames) = try await watchFrames(platform, publisher.streamId)
            #expect(await eventually(.seconds(10)) { !frames.all.isEmpty || stream.endReason != nil })
            let decodedBeforeTheEnd = !frames.all.isEmpty
            #expect(await eventually(.seconds(20)) { stream.endReason != nil }, "the stream did not end")
            let ended = stream.endReason
            _ = renderer
            await viewer.stop()
            await publisher.stop()
            await media.stop()
            await publisherClient.stop()
            await platform.shutdown()
            #expect(decodedBeforeTheEnd, "no frame was decoded before the source failed")
            guard case .remote(let reason, _)? = ended else {
                Issue.record("the stream ended as \(String(describing: ended))")
                return
            }
            #expect(reason == .failed)
        }
    }
}
