import Foundation
import PCastMedia
import PCastProtocol

/// A stream being recorded by this client into a fragmented MP4 file (``PCast/record(streamToken:to:mode:)``).
/// The recording follows the stream: it finishes when the stream ends, or on ``stop()``.
///
/// ```swift
/// let recording = try await pcast.record(streamToken: token, to: "/var/rec/show.mp4", mode: .append)
/// let summary = await recording.ended()        // when the publisher stops
/// print(summary.duration, summary.partDuration)
/// ```
public final class StreamRecording: Sendable {
    public let streamId: String
    let stream: MediaStream
    let recorder: MediaRecorder

    init(streamId: String, stream: MediaStream, recorder: MediaRecorder) {
        self.streamId = streamId
        self.stream = stream
        self.recorder = recorder
    }

    public var path: String { recorder.path }

    /// Stops recording (unsubscribes) and finishes the file.
    public func stop() async -> RecordingSummary {
        await stream.stop()
        return await recorder.finish()
    }

    /// Waits until the stream ends, then finishes the file.
    public func ended() async -> RecordingSummary {
        _ = await stream.ended()
        await stream.stop()
        return await recorder.finish()
    }
}
