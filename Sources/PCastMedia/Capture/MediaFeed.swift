import Foundation
import GStreamer
import Synchronization

/// Raw frames the application hands to a ``UserMediaStream`` as its video or audio source: frames
/// it makes itself, or takes from a GStreamer pipeline of its own (PCastKit's `pcastsink` element
/// feeds its stream this way). A live source: each frame is stamped when it is pushed.
///
/// ```swift
/// let feed = MediaFeed()
/// var options = UserMediaOptions()
/// options.video.source = .feed(feed)
/// options.video.width = .exact(320); options.video.height = .exact(240); options.video.frameRate = .exact(30)
/// options.audio.enabled = false
/// async let media = UserMedia.getUserMedia(options)   // waits for the first frame
/// while … { feed.push(frame) }                         // I420/NV12/BGRA frames, any size: scaled to the track's
/// ```
public final class MediaFeed: Sendable, Hashable {
    private struct State {
        var source: AppSource?
        var caps: Caps?
        var ended = false
    }

    private let id = UUID()
    private let state = Mutex(State())

    public init() {}

    /// The `appsrc` a user media stream builds for this feed.
    var sourceDescription: String {
        // Frames beyond two queued are dropped rather than delaying the ones after them.
        "appsrc name=\(appSourceName) is-live=true do-timestamp=true format=time max-buffers=2"
    }

    var appSourceName: String { "feed-\(id.uuidString.prefix(8).lowercased())" }

    /// Whether a stream's source is attached (frames pushed before are dropped).
    public var isAttached: Bool { state.withLock { $0.source != nil } }

    func attach(_ source: AppSource) {
        state.withLock { state in
            state.source = source
            state.caps = nil
        }
    }

    func detach() {
        state.withLock { $0.source = nil }
    }

    /// Hands over one video frame; `false` when it was dropped (no stream attached yet, the queue
    /// full, or the feed ended).
    @discardableResult
    public func push(_ frame: VideoFrame) -> Bool {
        // A variable frame rate: the stream's track takes its rate from the frames' arrival.
        guard let caps = try? Caps("video/x-raw,format=\(frame.format.rawValue),width=\(frame.width),height=\(frame.height),framerate=0/1") else {
            return false
        }
        return push(frame.storage, caps: caps)
    }

    /// Hands over one block of interleaved audio samples.
    @discardableResult
    public func push(_ frame: AudioFrame) -> Bool {
        guard let caps = try? Caps("audio/x-raw,format=\(frame.format.gstreamerName),layout=interleaved,rate=\(frame.sampleRate),channels=\(frame.channels)") else {
            return false
        }
        return push(frame.storage, caps: caps)
    }

    /// Hands over a sample from another pipeline as it is (its buffer is shared, not copied).
    @discardableResult
    package func push(_ sample: Sample) -> Bool {
        guard let caps = sample.caps else { return false }
        return push(sample.buffer, caps: caps)
    }

    private func push(_ buffer: Buffer, caps: Caps) -> Bool {
        let source: AppSource? = state.withLock { state in
            guard !state.ended, let source = state.source else { return nil }
            // Compared, not printed: this runs for every frame.
            if state.caps != caps {
                guard (try? source.setCaps(caps)) != nil else { return nil }
                state.caps = caps
            }
            return source
        }
        return source?.pushNow(buffer) ?? false
    }

    /// Ends the feed: the stream's track ends as a source that played to its end does.
    public func end() {
        let source: AppSource? = state.withLock { state in
            state.ended = true
            return state.source
        }
        try? source?.endOfStream()
    }

    public static func == (a: MediaFeed, b: MediaFeed) -> Bool { a === b }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
