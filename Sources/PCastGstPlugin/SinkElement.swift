import CGStreamer
import CPCastGstPlugin
import Foundation
import GStreamer
import PCast
import PCastMedia
import Synchronization

/// pcastsink's behaviour: a platform session, a user media stream fed by the element's pads
/// (``MediaFeed``), and a publisher. Started at READY → PAUSED, ended by EOS on every pad or by
/// PAUSED → READY.
///
/// The session starts at once; the stream is published when every requested pad has negotiated
/// caps (the publisher takes the first caps' size and rate). Frames before that are dropped: a
/// live publisher does not hold the pipeline back.
/// Unchecked: the element pointer is immutable (GStreamer objects are thread-safe); the run's state is in the `Mutex` `run`.
final class SinkElement: @unchecked Sendable {
    struct Settings: Sendable {
        var server: String?
        var authToken: String?
        var token: String?
        var tags: [String]
        var streamName: String?
        var publishType: PublishType
        var videoBitrate: Int
        var videoCodec: VideoCodec
        var video: Bool
        var audio: Bool
        /// H.264 or Opus comes in already encoded: the bin muxes everything to Matroska, published
        /// through the SDK's ingest, which passes it through.
        var passthrough: Bool

        init(_ c: PCastSinkSettings) {
            server = String(settingsValue: c.server)
            authToken = String(settingsValue: c.auth_token)
            token = String(settingsValue: c.token)
            tags = (String(settingsValue: c.tags) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            streamName = String(settingsValue: c.stream_name)
            publishType = String(settingsValue: c.publish_type).flatMap(PublishType.init(rawValue:)) ?? .live
            videoBitrate = Int(c.video_bitrate)
            videoCodec = String(settingsValue: c.video_codec).flatMap(VideoCodec.init(encodingName:)) ?? .h264
            video = c.has_video != 0
            audio = c.has_audio != 0
            passthrough = c.passthrough != 0
        }
    }

    /// One run, from start to stop.
    final class Run: Sendable {
        let settings: Settings
        let element: ElementReference
        let feeds = [PadKind.video: MediaFeed(), .audio: MediaFeed()]
        /// Each requested pad's first caps; the publish waits for all of them.
        let caps = Mutex<[PadKind: Caps]>([:])
        let capsArrived = AsyncStream<Void>.makeStream()
        let ended = Mutex<Set<PadKind>>([])
        let task = Mutex<Task<Void, Never>?>(nil)
        let live = Mutex<(sdk: PCast?, media: UserMediaStream?, publisher: Publisher?)>((nil, nil, nil))
        /// Passthrough: the Matroska made before the stream is published (its header and the
        /// codecs' configuration come first and must not be lost), bounded.
        let pendingMuxed = Mutex<[UInt8]>([])
        static let pendingLimit = 16 << 20

        init(settings: Settings, element: ElementReference) {
            self.settings = settings
            self.element = element
        }

        var requested: Set<PadKind> {
            var kinds: Set<PadKind> = []
            if settings.video { kinds.insert(.video) }
            if settings.audio { kinds.insert(.audio) }
            return kinds
        }

        func sample(_ kind: PadKind, _ pointer: OpaquePointer) {
            guard let sample = Sample(borrowing: pointer) else { return }
            if let caps = sample.caps {
                let first = self.caps.withLock { known in
                    guard known[kind] == nil else { return false }
                    known[kind] = caps
                    return true
                }
                if first { capsArrived.continuation.yield() }
            }
            feeds[kind]?.push(sample)
        }

        /// Passthrough: Matroska bytes for the ingest, held until it exists. Held bytes and new
        /// ones are pushed under one lock, so the header always goes first.
        func muxed(_ pointer: OpaquePointer) {
            guard let sample = Sample(borrowing: pointer), let bytes = try? sample.buffer.withUnsafeBytes({ Array($0) }) else { return }
            pendingMuxed.withLock { pending in
                if let ingest = live.withLock({ $0.publisher?.ingest }) {
                    if !pending.isEmpty {
                        ingest.push(pending)
                        pending = []
                    }
                    ingest.push(bytes)
                } else if pending.count + bytes.count <= Self.pendingLimit {
                    pending += bytes
                }
            }
        }

        func publish() async {
            let settings = self.settings
            guard let server = settings.server, let authToken = settings.authToken, let token = settings.token else { return }
            let sdk = PCast(PCastOptions(uri: server))
            live.withLock { $0.sdk = sdk }
            do {
                _ = try await sdk.start(authToken: authToken)
            } catch {
                element.fail("pcastsink: no session with \(server): \(error.code) (\(error.status)) \(error.detail)", debug: "\(error)")
                return
            }
            if settings.passthrough {
                await publishPassthrough(sdk, token: token)
                return
            }
            // Wait for every requested pad's caps.
            for await _ in capsArrived.stream {
                if caps.withLock({ Set($0.keys) }).isSuperset(of: requested) { break }
            }
            guard !Task.isCancelled else { return }
            let known = caps.withLock { $0 }
            var options = UserMediaOptions()
            if let video = known[.video]?.videoInfo {
                options.video.source = .feed(feeds[.video]!)
                options.video.width = .exact(video.width)
                options.video.height = .exact(video.height)
                options.video.frameRate = .exact(video.frameRate > 0 ? video.frameRate : 30)
            } else {
                options.video.enabled = false
            }
            if known[.audio] != nil {
                options.audio.source = .feed(feeds[.audio]!)
            } else {
                options.audio.enabled = false
            }
            let media: UserMediaStream
            do {
                media = try await UserMedia.getUserMedia(options)
            } catch {
                element.fail("pcastsink: the pads' media cannot be published: \(error)", debug: "\(error)")
                return
            }
            live.withLock { $0.media = media }
            var encoding = EncodingSettings()
            if settings.videoBitrate > 0 { encoding.videoBitrate = settings.videoBitrate }
            encoding.videoCodec = settings.videoCodec
            let publisher: Publisher
            do {
                publisher = try await sdk.publish(streamToken: token, mediaStream: media, tags: settings.tags, settings: encoding,
                                                  publishType: settings.publishType, streamName: settings.streamName)
            } catch {
                element.fail("pcastsink: the platform refused the publish: \(error.code) (\(error.status)) \(error.detail)", debug: "\(error)")
                return
            }
            live.withLock { $0.publisher = publisher }
            observe(publisher)
        }

        /// H.264 and Opus as they came: the SDK's ingest takes the Matroska the bin muxes, parses
        /// and re-payloads both without decoding them.
        func publishPassthrough(_ sdk: PCast, token: String) async {
            let publisher: Publisher
            do {
                publisher = try await sdk.publish(streamToken: token, ingest: .pushedMatroska, tags: settings.tags,
                                                  publishType: settings.publishType, streamName: settings.streamName)
            } catch {
                element.fail("pcastsink: the platform refused the publish: \(error.code) (\(error.status)) \(error.detail)", debug: "\(error)")
                return
            }
            // What was muxed meanwhile goes first: under the lock the streaming thread pushes with.
            pendingMuxed.withLock { pending in
                live.withLock { $0.publisher = publisher }
                if !pending.isEmpty {
                    publisher.ingest?.push(pending)
                    pending = []
                }
            }
            observe(publisher)
        }

        /// Messages for the publisher's quality and end; the published message.
        func observe(_ publisher: Publisher) {
            let element = self.element
            publisher.setDataQualityChangedCallback { status, reason in
                element.post("pcast-data-quality", [("status", "\(status)"), ("reason", "\(reason)")])
            }
            publisher.setPublisherEndedCallback { reason, description in
                element.post("pcast-stream-ended", [("reason", "\(reason)"), ("description", description ?? "")])
            }
            pcast_element_stream_published(element.element, publisher.streamId)
        }

        /// Ends the stream (reason `ended`) and the session.
        func finish(description: String) async {
            task.withLock { $0?.cancel() }
            capsArrived.continuation.finish()
            let (sdk, media, publisher) = live.withLock { live in
                defer { live = (nil, nil, nil) }
                return live
            }
            if let publisher, !publisher.hasEnded {
                if settings.passthrough, let ingest = publisher.ingest {
                    // The ingest plays out what it holds, then ends the stream as the end of its source.
                    ingest.endPushedStream()
                    for _ in 0..<40 where !publisher.hasEnded { try? await Task.sleep(for: .milliseconds(50)) }
                }
                if !publisher.hasEnded { await publisher.stop(reason: .ended, description: description) }
            }
            await media?.stop()
            await sdk?.stop()
        }
    }

    private let element: UnsafeMutablePointer<GstElement>
    private let run = Mutex<Run?>(nil)

    init(element: UnsafeMutablePointer<GstElement>) {
        self.element = element
    }

    func start(_ settings: Settings) -> Bool {
        let reference = ElementReference(element)
        guard reference.requireProperties("pcastsink", ["server": settings.server, "auth-token": settings.authToken, "token": settings.token]) else {
            return false
        }
        guard settings.video || settings.audio else {
            reference.fail("pcastsink: nothing to publish", debug: "link a video or audio pad before PAUSED")
            return false
        }
        guard !settings.passthrough || settings.video else {
            // The ingest that passes media through carries a video track.
            reference.fail("pcastsink: an audio_opus pad needs a video pad (video or video_h264) beside it", debug: "audio-only passthrough is not supported")
            return false
        }
        guard !settings.passthrough || settings.videoCodec == .h264 else {
            // Passed-through media is muxed for the SDK's ingest, which carries H.264.
            reference.fail("pcastsink: video-codec \(settings.videoCodec.encodingName.lowercased()) needs raw pads only (video, audio): passed-through streams are H.264",
                           debug: "video_h264 or audio_opus requested with video-codec other than h264")
            return false
        }
        let run = Run(settings: settings, element: reference)
        run.task.withLock { $0 = Task { await run.publish() } }
        self.run.withLock { $0 = run }
        return true
    }

    func sample(_ kind: PCastPadKind, _ sample: OpaquePointer) {
        run.withLock { $0 }?.sample(PadKind(kind), sample)
    }

    func muxed(_ sample: OpaquePointer) {
        run.withLock { $0 }?.muxed(sample)
    }

    /// EOS on a pad: once every requested pad has ended, the stream ends as `ended`; the
    /// streaming thread waits (at most 5 s) so the end is sent before the pipeline's EOS.
    func endOfStream(_ kind: PCastPadKind) {
        guard let run = run.withLock({ $0 }) else { return }
        let all = run.ended.withLock { ended in
            ended.insert(PadKind(kind))
            return ended.isSuperset(of: run.requested)
        }
        guard all else { return }
        waitBriefly { await run.finish(description: "end of stream") }
    }

    func stop() {
        guard let run = run.withLock({ current in defer { current = nil }; return current }) else { return }
        waitBriefly { await run.finish(description: "the pipeline stopped") }
    }
}

/// A pad's kind, from the C side's `PCastPadKind`.
enum PadKind: Sendable, Hashable {
    case video, audio

    init(_ kind: PCastPadKind) { self = kind == PCAST_PAD_AUDIO ? .audio : .video }
}
