import CGStreamer
import CPCastGstPlugin
import Foundation
import GStreamer
import PCast
import PCastMedia
import Synchronization

/// pcastsrc's behaviour: a platform session, a subscription, and a renderer without devices whose
/// frame-ready hooks hand each decoded frame to the element's pads. Started at READY → PAUSED;
/// the stream's end becomes a `pcast-stream-ended` message and EOS.
/// Unchecked: the element pointer is immutable (GStreamer objects are thread-safe); the run's state is in the `Mutex` `run`.
final class SourceElement: @unchecked Sendable {
    struct Settings: Sendable {
        var server: String?
        var authToken: String?
        var token: String?
        var playoutDelay: Duration?
        var decode: Bool

        init(_ c: PCastSourceSettings) {
            server = String(settingsValue: c.server)
            authToken = String(settingsValue: c.auth_token)
            token = String(settingsValue: c.token)
            playoutDelay = c.playout_delay > 0 ? .milliseconds(Int(c.playout_delay)) : nil
            decode = c.decode != 0
        }
    }

    final class Run: Sendable {
        let settings: Settings
        let element: ElementReference
        let task = Mutex<Task<Void, Never>?>(nil)
        let live = Mutex<(sdk: PCast?, stream: MediaStream?, renderer: Renderer?)>((nil, nil, nil))

        init(settings: Settings, element: ElementReference) {
            self.settings = settings
            self.element = element
        }

        func play() async {
            guard let server = settings.server, let authToken = settings.authToken, let token = settings.token else { return }
            var options = PCastOptions(uri: server)
            if let delay = settings.playoutDelay { options.playoutDelay = delay }
            let sdk = PCast(options)
            live.withLock { $0.sdk = sdk }
            do {
                _ = try await sdk.start(authToken: authToken)
            } catch {
                element.fail("pcastsrc: no session with \(server): \(error.code) (\(error.status)) \(error.detail)", debug: "\(error)")
                return
            }
            if !settings.decode {
                await playEncoded(sdk, token: token)
                return
            }
            let stream: MediaStream
            do {
                stream = try await sdk.subscribe(streamToken: token)
            } catch {
                element.fail("pcastsrc: the platform refused the subscription: \(error.code) (\(error.status)) \(error.detail)", debug: "\(error)")
                return
            }
            guard !Task.isCancelled else { return }
            // Not synchronised: frames go on as they are decoded, and the pipeline's own sink times them.
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true, synchronized: false))
            live.withLock { $0.stream = stream; $0.renderer = renderer }
            let element = self.element
            let video = stream.getVideoTracks().first, audio = stream.getAudioTracks().first
            pcast_src_add_pads(element.element, video != nil ? 1 : 0, audio != nil ? 1 : 0)
            // Hooks go on a started renderer; the first frames decoded before them are not missed
            // by a viewer that joins anyway at a keyframe.
            let status = await renderer.start()
            guard status == .ok else {
                element.fail("pcastsrc: the stream cannot be decoded (\(status))")
                return
            }
            do {
                if let video {
                    let videoCaps = CapsCache()
                    try renderer.setFrameReadyCallback(video) { notification in
                        guard case .video(let frame)? = try? notification.read(),
                              let caps = videoCaps.caps(for: "video/x-raw,format=\(frame.format.rawValue),width=\(frame.width),height=\(frame.height),framerate=0/1")
                        else { return }
                        _ = pcast_src_push(element.element, PCAST_PAD_VIDEO, frame.buffer.retainedPointer(), caps.pointer)
                    }
                }
                if let audio {
                    let audioCaps = CapsCache()
                    try renderer.setFrameReadyCallback(audio) { notification in
                        guard case .audio(let frame)? = try? notification.read(),
                              let caps = audioCaps.caps(for: "audio/x-raw,format=\(frame.format.gstreamerName),layout=interleaved,rate=\(frame.sampleRate),channels=\(frame.channels)")
                        else { return }
                        _ = pcast_src_push(element.element, PCAST_PAD_AUDIO, frame.buffer.retainedPointer(), caps.pointer)
                    }
                }
            } catch {
                element.fail("pcastsrc: cannot take the decoded frames: \(error)", debug: "\(error)")
                return
            }
            await endWhenDone(stream)
        }

        /// decode=false: the H.264 access units and Opus packets as they came, with their caps.
        func playEncoded(_ sdk: PCast, token: String) async {
            let element = self.element
            let stream: MediaStream
            do {
                stream = try await sdk.subscribeEncoded(streamToken: token, playoutDelay: settings.playoutDelay, onTracks: { kinds in
                    // The pads exist before the first unit arrives.
                    pcast_src_add_pads(element.element, kinds.contains(.video) ? 1 : 0, kinds.contains(.audio) ? 1 : 0)
                }, onSample: { kind, sample in
                    guard let caps = sample.caps else { return }
                    _ = pcast_src_push(element.element, kind == .video ? PCAST_PAD_VIDEO : PCAST_PAD_AUDIO, sample.buffer.retainedPointer(), caps.pointer)
                })
            } catch {
                element.fail("pcastsrc: the platform refused the subscription: \(error.code) (\(error.status)) \(error.detail)", debug: "\(error)")
                return
            }
            live.withLock { $0.stream = stream }
            await endWhenDone(stream)
        }

        /// The stream's end: a message with the reason, then EOS on the pads.
        func endWhenDone(_ stream: MediaStream) async {
            let reason = await stream.ended()
            guard !Task.isCancelled else { return }
            switch reason {
            case .remote(let why, let description):
                element.post("pcast-stream-ended", [("reason", "\(why)"), ("description", description ?? "")])
            default:
                element.post("pcast-stream-ended", [("reason", "\(reason)")])
            }
            pcast_src_end(element.element)
        }

        func finish() async {
            task.withLock { $0?.cancel() }
            let (sdk, stream, renderer) = live.withLock { live in
                defer { live = (nil, nil, nil) }
                return live
            }
            await renderer?.stop()
            await stream?.stop()
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
        guard reference.requireProperties("pcastsrc", ["server": settings.server, "auth-token": settings.authToken, "token": settings.token]) else {
            return false
        }
        let run = Run(settings: settings, element: reference)
        run.task.withLock { $0 = Task { await run.play() } }
        self.run.withLock { $0 = run }
        return true
    }

    func stop() {
        guard let run = run.withLock({ current in defer { current = nil }; return current }) else { return }
        waitBriefly { await run.finish() }
    }
}

/// The caps of a track's frames, parsed once and again only when their description changes (the
/// frame-ready hooks run for every frame).
final class CapsCache: Sendable {
    private let last = Mutex<(description: String, caps: Caps)?>(nil)

    func caps(for description: String) -> Caps? {
        if let cached = last.withLock({ $0 }), cached.description == description { return cached.caps }
        guard let caps = try? Caps(description) else { return nil }
        last.withLock { $0 = (description, caps) }
        return caps
    }
}
