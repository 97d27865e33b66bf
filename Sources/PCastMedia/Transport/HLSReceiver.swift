import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GStreamer
import PCastProtocol
import Synchronization

/// Plays a stream the platform delivers as HLS (a viewer with the `streaming` capability), in one
/// of two ways (``Delivery``):
/// - following its low-latency parts (the default): the playlist is read with blocking reloads
///   (``LowLatencyPlaylist``), playback starts at the next independent part after the live edge,
///   and each part is fetched as soon as it is listed and pushed into `decodebin3`: about a part
///   (≤ 0.5 s) behind the publisher instead of hlsdemux2's three segments;
/// - `uridecodebin3` (GStreamer's adaptive demuxer hlsdemux2, which knows low-latency parts; the
///   older `uridecodebin` picks the legacy hlsdemux, which does not) fetches the playlist and its
///   segments and decodes them, for a playlist without parts.
///
/// Either way the raw media reaches `video-tee` / `audio-tee`
/// as a real-time stream's does, so renderers and frame-ready hooks attach the same way. The
/// pacing sinks follow the clock and hold the decoders back (their queues do not leak, unlike a
/// real-time stream's): a segment downloaded at once still plays at its own pace, from where the
/// demuxer starts (the playlist's hold-back behind the live edge). The playlist's end (`EXT-X-ENDLIST`, played out)
/// ends the stream as the remote's `ended`; an HTTP or decoding error as `failed`, with
/// GStreamer's message.
/// Unchecked: GStreamer objects and `Mutex`/atomic state; `follower` and `busTask` are set in `start`, before it is returned.
package final class HLSReceiver: StreamEngine, @unchecked Sendable {
    /// How the playlist is played.
    package enum Delivery: Sendable, Hashable {
        /// Low-latency parts, followed by the SDK (see the type's documentation).
        case parts
        /// GStreamer's hlsdemux2, segments from three back.
        case segments
    }

    let pipeline: Pipeline
    let delivery: Delivery
    private var follower: Task<Void, Never>?
    /// The playlist played (after the application's source mapping).
    package let url: String
    let ends = EndSignal()
    private let kinds: Set<MediaType>
    private let get: Get
    private let stopped = Atomic<Bool>(false)
    private var busTask: Task<Void, Never>?
    private let videoFrames = Atomic<Int>(0)
    private let firstVideo = Mutex<ContinuousClock.Instant?>(nil)

    private init(url: String, kinds: Set<MediaType>, delivery: Delivery, get: @escaping Get) throws(MediaError) {
        guard !url.contains("\""), !url.contains("\\"), !url.unicodeScalars.contains(where: { $0.value < 0x21 }) else {
            throw .gstreamer(.invalidDescription("the playlist URL contains characters a pipeline description cannot carry"))
        }
        guard let scheme = URL(string: url)?.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw .gstreamer(.invalidDescription("the playlist URL must be http or https: \(url)"))
        }
        self.url = url
        self.kinds = kinds
        self.delivery = delivery
        self.get = get
        var lines = [delivery == .segments ? "uridecodebin3 name=hls-source uri=\"\(url)\""
                                           : "appsrc name=hls-parts format=bytes is-live=false max-bytes=4000000 ! qtdemux name=hls-demux"]
        // The platform packages H.264 and Opus; parts are demuxed and decoded here (decodebin3
        // behind an appsrc left qtdemux's pads unlinked at the first fragment: not-linked).
        let audioHead = delivery == .segments ? "hls-source. ! audio/x-raw" : "hls-demux.audio_0 ! queue name=audio-parts ! opusdec ! audio/x-raw"
        let videoHead = delivery == .segments ? "hls-source. ! video/x-raw" : "hls-demux.video_0 ! queue name=video-parts ! h264parse ! avdec_h264 ! video/x-raw"
        // The audio branch first: parse-launch's delayed links then link both (see ingest.pipeline).
        if kinds.contains(.audio) {
            lines.append(audioHead + " ! queue name=audio-queue ! audioconvert ! audioresample"
                + " ! audio/x-raw,format=S16LE,layout=interleaved,rate=48000 ! identity name=audio-hook"
                + " ! tee name=audio-tee allow-not-linked=true ! queue max-size-buffers=8 ! fakesink name=audio-pacer sync=true async=false")
        }
        if kinds.contains(.video) {
            lines.append(videoHead + " ! queue name=video-queue ! videoconvert ! video/x-raw,format=I420 ! identity name=video-hook"
                + " ! tee name=video-tee allow-not-linked=true ! queue max-size-buffers=2 ! fakesink name=video-pacer sync=true async=false")
        }
        do {
            pipeline = try Pipeline(description: lines.joined(separator: "\n"))
        } catch {
            throw .gstreamer(error)
        }
    }

    /// One HTTP GET: the body and the status. The SDK gives its own when the application trusts a
    /// private CA (URLSession cannot be told one).
    package typealias Get = @Sendable (URL) async throws -> (Data, Int)

    /// URLSession: the system's trust store.
    package static let systemGet: Get = { url in
        let (data, response) = try await URLSession.shared.data(for: URLRequest(url: url, timeoutInterval: 10))
        return (data, (response as? HTTPURLResponse)?.statusCode ?? 0)
    }

    /// Starts playing `url` (an HLS media playlist) with branches for `kinds`, its playlists and
    /// parts fetched with `get`. `customTrust`: `get` trusts what the system does not; GStreamer's
    /// segment player cannot, so a playlist without parts is then refused.
    package static func start(url: String, kinds: Set<MediaType>, delivery: Delivery = .parts, get: @escaping Get = systemGet,
                              customTrust: Bool = false) async throws(MediaError) -> (HLSReceiver, MediaStream) {
        var delivery = delivery
        // Parts only where the playlist has them (a CDN's copy may be plain HLS): else segments.
        // The follower starts from this first reading.
        var first: LowLatencyPlaylist?
        if delivery == .parts, let playlistURL = URL(string: url) {
            first = try? await Self.playlist(playlistURL, blockingAt: nil, get: get)
            if first?.partTarget == nil { delivery = .segments }
        }
        if delivery == .segments && customTrust && url.lowercased().hasPrefix("https:") {
            throw .gstreamer(.invalidDescription("HLS segments over HTTPS with a private certificate authority: GStreamer's HLS player trusts "
                + "the system's authorities only; play the low-latency parts (streamingPlayback .lowLatency) or install the authority system-wide"))
        }
        let receiver = try HLSReceiver(url: url, kinds: kinds, delivery: delivery, get: get)
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
            // answers fails the subscribe (souphttpsrc gives up after 15 s; the part follower's
            // requests after 10 s).
            receiver.watchBus()
            if delivery == .parts, let first {
                try receiver.rebaseParts()
                let input = try receiver.pipeline.appSource(named: "hls-parts")
                try await receiver.pipeline.pause(timeout: .seconds(5))
                receiver.follow(first, into: input)
                try await receiver.waitForMedia(within: .seconds(20))
            } else {
                try await receiver.pipeline.pause(timeout: .seconds(20))
            }
        } catch {
            await receiver.pipeline.stop()
            throw .gstreamer(error)
        }
        let stream = MediaStream(engine: receiver, tracks: tracks)
        receiver.ends.attach { [weak stream] reason in stream?.finish(reason) }
        return (receiver, stream)
    }

    private let playing = Atomic<Bool>(false)

    /// Parts start wherever the stream was when the player joined (seconds, minutes into it): the
    /// first demuxed buffer's running time becomes zero for both kinds (a pad offset where the
    /// raw media leaves for the tees), so the pipeline, played at the first decoded media, shows
    /// it at once instead of waiting out the stream's age.
    private func rebaseParts() throws(GStreamerError) {
        let hooks = try kinds.map { kind throws(GStreamerError) in try pipeline.element(named: kind == .video ? "video-hook" : "audio-hook").staticPad("src") }
        let rebased = Atomic<Bool>(false)
        for kind in kinds {
            let entry = try pipeline.element(named: kind == .video ? "video-parts" : "audio-parts").staticPad("sink")
            // Gone after the first buffer: nothing is left on the per-buffer path.
            _ = entry.addBufferProbe { [entry] buffer in
                guard !rebased.load(ordering: .relaxed) else { return .remove }
                guard let timestamp = buffer.presentationTimestamp, let runningTime = entry.runningTime(of: timestamp) else { return .pass }
                if !rebased.exchange(true, ordering: .relaxed) {
                    for hook in hooks { hook.offset = .zero - runningTime }
                }
                return .remove
            }
        }
    }

    /// Waits until the first decoded media (the pipeline then plays), the stream ends, or `limit`.
    private func waitForMedia(within limit: Duration) async throws(GStreamerError) {
        let deadline = ContinuousClock.now + limit
        while !playing.load(ordering: .relaxed) {
            if let reason = ends.pendingReason { throw .flow("the HLS player did not start: \(reason)") }
            guard ContinuousClock.now < deadline else { throw .flow("the HLS player did not start within \(limit)") }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Follows the playlist's parts, from its `first` reading, into `input` until the playlist
    /// ends (end of stream), the receiver stops, or a request fails (the stream fails with why).
    private func follow(_ first: LowLatencyPlaylist, into input: AppSource) {
        guard let playlistURL = URL(string: url) else { return }
        let get = self.get
        follower = Task { [weak self] in
            var playlist = first
            /// The playlist again, held until the part at `position` is listed; a server that does
            /// not hold blocking reloads answers at once, and is not asked again in a tight loop.
            func reload(at position: LowLatencyPlaylist.Position) async throws {
                let before = playlist.nextPosition
                playlist = try await Self.playlist(playlistURL, blockingAt: position, get: get)
                if playlist.nextPosition == before { try await Task.sleep(for: .milliseconds(100)) }
            }
            do {
                guard let map = playlist.map else { throw LowLatencyPlaylist.Malformed(description: "the playlist has no EXT-X-MAP") }
                try await input.push(Buffer(bytes: try await Self.fetch(map, relativeTo: playlistURL, get: get)))
                // Playback starts at the first independent part from the live edge on.
                var waitingFor = playlist.nextPosition
                var next = playlist.firstIndependent(atOrAfter: waitingFor)
                while next == nil {
                    guard let self, !self.stopped.load(ordering: .relaxed), !playlist.ended else { try? input.endOfStream(); return }
                    try await reload(at: waitingFor)
                    next = playlist.firstIndependent(atOrAfter: waitingFor)
                    if next == nil { waitingFor = max(waitingFor, playlist.nextPosition) }
                }
                var position = next!
                while let self, !self.stopped.load(ordering: .relaxed) {
                    position = playlist.normalised(position)
                    if let part = playlist.parts[position] {
                        try await input.push(Buffer(bytes: try await Self.fetch(part.uri, relativeTo: playlistURL, get: get)))
                        position = playlist.successor(of: position)
                    } else if playlist.ended, position >= playlist.nextPosition {
                        try? input.endOfStream()
                        return
                    } else if let oldest = playlist.parts.keys.min(), position < oldest {
                        // Fallen out of the window (a long stall): on from the next independent part.
                        position = playlist.firstIndependent(atOrAfter: oldest) ?? playlist.nextPosition
                    } else {
                        try await reload(at: position)
                    }
                }
            } catch {
                // A stop cancels the requests under way: that is no failure.
                guard let self, !self.stopped.load(ordering: .relaxed) else { return }
                self.ends.fire(.failed("the HLS parts could not be followed: \(error)"))
            }
        }
    }

    /// Requests for the playlist and its parts: bounded, and answered with success or a typed failure.
    struct RequestFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// The playlist, held by the server until the part at `position` is listed (a blocking reload)
    /// when given. A 503 (the wait timed out) is asked again.
    package static func playlist(_ url: URL, blockingAt position: LowLatencyPlaylist.Position?, get: Get = systemGet) async throws -> LowLatencyPlaylist {
        var target = url
        if let position, var components = URLComponents(url: url, resolvingAgainstBaseURL: false) {
            components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "_HLS_msn", value: String(position.sequence)),
                                                                     URLQueryItem(name: "_HLS_part", value: String(position.part))]
            target = components.url ?? url
        }
        for _ in 0..<5 {
            let (data, status) = try await get(target)
            if status == 503 { continue }
            guard status == 200 else { throw RequestFailure(description: "the playlist: HTTP \(status)") }
            return try LowLatencyPlaylist(parsing: String(decoding: data, as: UTF8.self))
        }
        throw RequestFailure(description: "the playlist: no part came within five waits")
    }

    package static func fetch(_ uri: String, relativeTo base: URL, get: Get = systemGet) async throws -> [UInt8] {
        guard let url = URL(string: uri, relativeTo: base)?.absoluteURL else { throw RequestFailure(description: "a bad URI: \(uri.prefix(80))") }
        let (data, status) = try await get(url)
        guard status == 200 else { throw RequestFailure(description: "\(url.lastPathComponent): HTTP \(status)") }
        return [UInt8](data)
    }

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
        follower?.cancel()
        await pipeline.stop()
    }
}
