import Foundation
import GStreamer
import PCastProtocol
import Synchronization

/// Plays a stream the platform delivers as HLS (a viewer with the `streaming` capability):
/// `uridecodebin3` (GStreamer's adaptive demuxer hlsdemux2, which knows low-latency parts; the
/// older `uridecodebin` picks the legacy hlsdemux, which does not) fetches the playlist and its
/// parts and decodes them, and the raw media reaches `video-tee` / `audio-tee`
/// as a real-time stream's does, so renderers and frame-ready hooks attach the same way. The
/// pacing sinks follow the clock and hold the decoders back (their queues do not leak, unlike a
/// real-time stream's): a segment downloaded at once still plays at its own pace, from where the
/// demuxer starts (the playlist's hold-back behind the live edge). The playlist's end (`EXT-X-ENDLIST`, played out)
/// ends the stream as the remote's `ended`; an HTTP or decoding error as `failed`, with
/// GStreamer's message.
package final class HLSReceiver: StreamEngine, @unchecked Sendable {
    let pipeline: Pipeline
    /// The playlist played (after the application's source mapping).
    package let url: String
    let ends = EndSignal()
    private let kinds: Set<MediaType>
    private let stopped = Atomic<Bool>(false)
    private var busTask: Task<Void, Never>?
    private let videoFrames = Atomic<Int>(0)
    private let firstVideo = Mutex<ContinuousClock.Instant?>(nil)

    private init(url: String, kinds: Set<MediaType>) throws(MediaError) {
        guard !url.contains("\""), !url.contains("\\"), !url.unicodeScalars.contains(where: { $0.value < 0x21 }) else {
            throw .gstreamer(.invalidDescription("the playlist URL contains characters a pipeline description cannot carry"))
        }
        guard let scheme = URL(string: url)?.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw .gstreamer(.invalidDescription("the playlist URL must be http or https: \(url)"))
        }
        self.url = url
        self.kinds = kinds
        var lines = ["uridecodebin3 name=hls-source uri=\"\(url)\""]
        // The audio branch first: parse-launch's delayed links then link both (see ingest.pipeline).
        if kinds.contains(.audio) {
            lines.append("hls-source. ! audio/x-raw ! queue name=audio-queue ! audioconvert ! audioresample"
                + " ! audio/x-raw,format=S16LE,layout=interleaved,rate=48000 ! identity name=audio-hook"
                + " ! tee name=audio-tee allow-not-linked=true ! queue max-size-buffers=8 ! fakesink name=audio-pacer sync=true async=false")
        }
        if kinds.contains(.video) {
            lines.append("hls-source. ! video/x-raw ! queue name=video-queue ! videoconvert ! video/x-raw,format=I420 ! identity name=video-hook"
                + " ! tee name=video-tee allow-not-linked=true ! queue max-size-buffers=2 ! fakesink name=video-pacer sync=true async=false")
        }
        do {
            pipeline = try Pipeline(description: lines.joined(separator: "\n"))
        } catch {
            throw .gstreamer(error)
        }
    }

    /// Starts playing `url` (an HLS media playlist) with branches for `kinds`.
    package static func start(url: String, kinds: Set<MediaType>) async throws(MediaError) -> (HLSReceiver, MediaStream) {
        let receiver = try HLSReceiver(url: url, kinds: kinds)
        var tracks: [MediaStreamTrack] = []
        do {
            for kind in [MediaType.video, .audio] where kinds.contains(kind) {
                let gate = TrackGate(kind: kind)
                let hook = try receiver.pipeline.element(named: kind == .video ? "video-hook" : "audio-hook").staticPad("src")
                gate.install(on: hook)
                tracks.append(MediaStreamTrack(kind: kind, source: nil, gate: gate))
                _ = hook.addBufferProbe { [weak receiver] _ in
                    guard let receiver else { return .pass }
                    receiver.mediaArrived()
                    if kind == .video, receiver.videoFrames.add(1, ordering: .relaxed).oldValue == 0 {
                        receiver.firstVideo.withLock { $0 = .now }
                    }
                    return .pass
                }
            }
            // Paused until the first decoded media: the clock's base is taken when it plays, so
            // the media plays from its first frame on (started at once, the pipeline's running
            // time would be seconds ahead of the first segment's, and the sinks would drop it all
            // as late). The sinks hold the first buffers meanwhile. Bounded: a server that never
            // answers fails the subscribe (souphttpsrc gives up after 15 s).
            try await receiver.pipeline.pause(timeout: .seconds(20))
        } catch {
            await receiver.pipeline.stop()
            throw .gstreamer(error)
        }
        let stream = MediaStream(engine: receiver, tracks: tracks)
        receiver.ends.attach { [weak stream] reason in stream?.finish(reason) }
        receiver.watchBus()
        return (receiver, stream)
    }

    private let playing = Atomic<Bool>(false)

    /// The first decoded media is there: the pipeline plays (on a task: not on the streaming thread).
    private func mediaArrived() {
        guard !playing.exchange(true, ordering: .relaxed) else { return }
        Task { [weak self] in
            guard let self, !self.stopped.load(ordering: .relaxed) else { return }
            do throws(GStreamerError) {
                try await self.pipeline.play(timeout: nil)
            } catch {
                self.ends.fire(.failed("the HLS player did not start: \(error)"))
            }
        }
    }

    func tee(for kind: MediaType) -> Element? {
        guard kinds.contains(kind) else { return nil }
        return try? pipeline.element(named: kind == .video ? "video-tee" : "audio-tee")
    }

    var firstVideoDecodedAt: ContinuousClock.Instant? { firstVideo.withLock { $0 } }

    /// Video frames decoded so far.
    package var decodedVideoFrames: Int { videoFrames.load(ordering: .relaxed) }

    private func watchBus() {
        let bus = pipeline.bus
        busTask = Task { [weak self] in
            for await message in bus {
                switch message.kind {
                case .error(let error):
                    self?.ends.fire(.failed(error.description))
                    return
                case .endOfStream:
                    self?.ends.fire(.remote(.ended, "the stream's HLS playlist ended"))
                    return
                default:
                    continue
                }
            }
        }
    }

    func stop() async {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        busTask?.cancel()
        await pipeline.stop()
    }
}
