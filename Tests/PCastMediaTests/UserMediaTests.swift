import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import PCastTestSupport
import Synchronization
import Testing

func syntheticOptions(width: Int = 320, height: Int = 240, fps: Double = 30, audio: Bool = false) -> UserMediaOptions {
    var options = UserMediaOptions()
    options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
    options.video.width = .exact(width)
    options.video.height = .exact(height)
    options.video.frameRate = .exact(fps)
    options.audio.enabled = audio
    if audio { options.audio.deviceId = .exact(SourceDevices.syntheticAudioId) }
    return options
}


@Suite("getUserMedia, tracks and renderers", .serialized)
struct UserMediaTests {
    @Test("the device list has synthetic and null sources of both kinds")
    func builtInDevices() async {
        let video = await UserMedia.enumerateSourceDevices(.video)
        let audio = await UserMedia.enumerateSourceDevices(.audio)
        #expect(video.contains { $0.id == SourceDevices.syntheticVideoId && $0.deviceType == .synthetic && $0.mediaType == .video })
        #expect(video.contains { $0.id == SourceDevices.nullVideoId && $0.deviceType == .null })
        #expect(audio.contains { $0.id == SourceDevices.syntheticAudioId && $0.deviceType == .synthetic && $0.mediaType == .audio })
        #expect(audio.contains { $0.id == SourceDevices.nullAudioId && $0.deviceType == .null })
    }

    @Test("a synthetic source gives frames of exactly the constrained size to a null renderer")
    func syntheticToNullRenderer() async throws {
        let media = try await UserMedia.getUserMedia(syntheticOptions(width: 320, height: 240))
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        let surfaces = Recorder<RenderSurface>()
        renderer.setRenderSurfaceReadyCallback { surfaces.append($0) }
        // The same events as a sequence, which ends when the renderer stops.
        let surfaceSequence = renderer.renderSurfaces
        let streamedSurfaces = Task { await surfaceSequence.reduce(into: [RenderSurface]()) { $0.append($1) } }
        #expect(await renderer.start() == .ok)
        #expect(await renderer.start() == .alreadyStarted)
        #expect(await eventually { (try? renderer.lastVideoFrameRendered()) != nil })
        let frame = try renderer.lastVideoFrameRendered()
        #expect(frame.width == 320 && frame.height == 240 && frame.format == .i420)
        #expect(surfaces.all == [.offscreen])
        #expect(renderer.videoDimensions == Dimensions(width: 320, height: 240))
        let track = try #require(media.mediaStream.getVideoTracks().first)
        #expect(track.state == .live && track.isEnabled && track.source?.deviceType == .synthetic)
        #expect(media.mediaStream.getAudioTracks().isEmpty)
        // The Swift-native names give what the seed's spellings give.
        #expect(media.mediaStream.videoTracks.map(\.id) == [track.id] && media.mediaStream.tracks.map(\.id) == [track.id])
        #expect(media.mediaStream.audioTracks.isEmpty)
        await renderer.stop()
        #expect(await streamedSurfaces.value == [.offscreen])
        await media.stop()
        #expect(track.state == .ended)
        #expect(media.mediaStream.endReason == .stopped)
    }

    @Test("applyOptions changes the resolution live and the renderer reports the new dimensions")
    func liveResolutionSwitch() async throws {
        let media = try await UserMedia.getUserMedia(syntheticOptions(width: 320, height: 240))
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true))
        let sizes = Recorder<Dimensions>()
        renderer.setVideoDisplayDimensionsChangedCallback { sizes.append($0) }
        let sizeSequence = renderer.videoDisplayDimensionsChanges
        let streamedSizes = Task { await sizeSequence.reduce(into: [Dimensions]()) { $0.append($1) } }
        #expect(await renderer.start() == .ok)
        #expect(await eventually { sizes.all.contains(Dimensions(width: 320, height: 240)) })
        try await media.applyOptions(syntheticOptions(width: 640, height: 360))
        #expect(await eventually { sizes.all.last == Dimensions(width: 640, height: 360) })
        #expect(await eventually { (try? renderer.lastVideoFrameRendered())?.width == 640 })
        #expect(media.videoSelection?.width == 640)
        // Switching to another source keeps the renderer running.
        var black = syntheticOptions(width: 640, height: 360)
        black.video.deviceId = .exact(SourceDevices.nullVideoId)
        try await media.applyOptions(black)
        #expect(media.mediaStream.getVideoTracks().first?.source?.id == SourceDevices.nullVideoId)
        #expect(await eventually {
            guard let frame = try? renderer.lastVideoFrameRendered() else { return false }
            return (try? frame.withUnsafeBytes { near($0.prefix(640), 16) }) ?? false
        })
        await renderer.stop()
        #expect(await streamedSizes.value == sizes.all)
        await media.stop()
    }

    @Test("a disabled video track sends black frames and an enabled one the picture again")
    func disableVideo() async throws {
        let media = try await UserMedia.getUserMedia(syntheticOptions())
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true))
        #expect(await renderer.start() == .ok)
        let track = try #require(media.mediaStream.getVideoTracks().first)
        @Sendable func lumaRow() -> [UInt8]? { try? renderer.lastVideoFrameRendered().withUnsafeBytes { Array($0.prefix(320)) } }
        #expect(await eventually { lumaRow().map { !near($0, 16) } ?? false })
        track.setEnabled(false)
        #expect(await eventually { lumaRow().map { near($0, 16, tolerance: 0) } ?? false })
        track.setEnabled(true)
        #expect(await eventually { lumaRow().map { !near($0, 16) } ?? false })
        await media.stop()
    }

    @Test("a disabled audio track sends silence; mute and unmute")
    func disableAudioAndMute() async throws {
        let media = try await UserMedia.getUserMedia(syntheticOptions(audio: true))
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        #expect(await renderer.start() == .ok)
        let track = try #require(media.mediaStream.getAudioTracks().first)
        let peaks = Recorder<Int>()
        try renderer.setFrameReadyCallback(track) { notification in
            guard let frame = try? notification.read().audio else { return }
            peaks.append(frame.samples.map { abs(Int($0)) }.max() ?? 0)
        }
        #expect(await eventually { (peaks.all.last ?? 0) > 1000 })
        track.setEnabled(false)
        #expect(await eventually { peaks.all.suffix(3).count == 3 && peaks.all.suffix(3).allSatisfy { $0 == 0 } })
        track.setEnabled(true)
        #expect(await eventually { (peaks.all.last ?? 0) > 1000 })
        #expect(!renderer.isAudioMuted)
        renderer.muteAudio()
        #expect(renderer.isAudioMuted)
        let volume = try media.engine.pipeline.elements.first { $0.name.hasSuffix("-volume") }.map { try $0.property("mute", as: Bool.self) }
        #expect(volume == true)
        renderer.unmuteAudio()
        #expect(!renderer.isAudioMuted)
        await media.stop()
    }

    @Test("the frame hook on the user media stream writes content that reaches the renderer, and drops are counted downstream")
    func hookWriteAndDrop() async throws {
        let media = try await UserMedia.getUserMedia(syntheticOptions())
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true))
        #expect(await renderer.start() == .ok)
        let track = try #require(media.mediaStream.getVideoTracks().first)
        try media.setFrameReadyCallback(track) { notification in
            guard var frame = try? notification.read(), case .video(var video) = frame else { return }
            let luma = video.strides[0] * video.height
            try? video.withUnsafeMutableBytes { bytes in
                for i in 0..<luma { bytes[i] = 200 }
            }
            frame = .video(video)
            try? notification.write(frame)
        }
        #expect(await eventually {
            (try? renderer.lastVideoFrameRendered().withUnsafeBytes { near($0.prefix(320), 200, tolerance: 0) }) ?? false
        })
        // Drop every other frame: the renderer's sink sees about half.
        let seen = Counter()
        try media.setFrameReadyCallback(track) { notification in
            if seen.increment() % 2 == 0 { notification.drop() }
        }
        #expect(await eventually { (media.frameStatistics(track)?.framesDroppedByCallback ?? 0) >= 10 })
        await media.stop()
    }

    @Test("a screenshot PNG decodes to the rendered size")
    func screenshotPNG() async throws {
        let media = try await UserMedia.getUserMedia(syntheticOptions(width: 320, height: 240))
        let renderer = media.mediaStream.createRenderer(RendererOptions(aspectRatioMode: .letterbox, useNullVideoDevice: true,
                                                                         displaySize: Dimensions(width: 400, height: 200)))
        let received = Recorder<VideoFrame>()
        renderer.setLastVideoFrameRenderedReceivedCallback { received.append($0) }
        #expect(await renderer.start() == .ok)
        #expect(await eventually { (try? renderer.lastVideoFrameRendered()) != nil })
        renderer.requestLastVideoFrameRendered()
        let frame = try #require(received.all.first)
        #expect(frame.width == 400 && frame.height == 200)
        let png = try await frame.pngData()
        #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        // Decode it with GStreamer's PNG decoder and check the size.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-shot-\(UUID().uuidString).png")
        try png.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let decode = try Pipeline(description: "filesrc location=\(file.path) ! pngdec ! videoconvert ! video/x-raw,format=I420 ! appsink name=out sync=false")
        let samples = try await runCollecting(decode)
        let info = try #require(samples.first?.videoInfo)
        #expect(info.width == 400 && info.height == 200)
        // Letterboxing 4:3 into 2:1 leaves black bars left and right.
        let decoded = try #require(samples.first)
        let firstRow = try decoded.buffer.withUnsafeBytes { Array($0.prefix(info.strides[0])) }
        #expect(near(firstRow.prefix(20), 16))
        await media.stop()
    }

    @Test("a file URI is a source; an unreachable URI is a typed error")
    func uriSources() async throws {
        let clip = URL(fileURLWithPath: try await TestMedia.clip720p()).absoluteString
        var options = UserMediaOptions()
        options.video.source = .uri(clip)
        options.video.width = .exact(640)
        options.video.height = .exact(360)
        options.audio.source = .uri(clip)
        let media = try await UserMedia.getUserMedia(options)
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        #expect(await renderer.start() == .ok)
        #expect(await eventually { (try? renderer.lastVideoFrameRendered())?.width == 640 })
        #expect(media.mediaStream.getVideoTracks().first?.source?.deviceType == .uri)
        await media.stop()

        var unreachable = UserMediaOptions()
        unreachable.video.source = .uri("http://127.0.0.1:9/missing.mp4")
        unreachable.audio.enabled = false
        await #expect(throws: UserMediaError.self) { try await UserMedia.getUserMedia(unreachable) }
    }

    @Test("a missing /dev/video0 is a typed error with the not-found status")
    func missingCamera() async {
        var options = UserMediaOptions()
        options.video.deviceId = .exact("/dev/video0")
        options.audio.enabled = false
        do {
            _ = try await UserMedia.getUserMedia(options)
            Issue.record("getUserMedia succeeded without a camera")
        } catch {
            #expect(error == .deviceNotFound("/dev/video0"))
            #expect(error.status == .notFound)
        }
    }

    @Test("a user's pipeline description is a source; a broken one is a typed error")
    func pipelineSources() async throws {
        var options = syntheticOptions(width: 160, height: 120)
        options.video.deviceId = nil
        options.video.source = .pipeline("videotestsrc is-live=true pattern=white")
        let media = try await UserMedia.getUserMedia(options)
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true))
        #expect(await renderer.start() == .ok)
        #expect(await eventually { (try? renderer.lastVideoFrameRendered().withUnsafeBytes { $0.prefix(160).allSatisfy { $0 > 200 } }) ?? false })
        await media.stop()

        options.video.source = .pipeline("nosuchsourceelement")
        do {
            _ = try await UserMedia.getUserMedia(options)
            Issue.record("a missing element was accepted")
        } catch {
            guard error.code == .missingElements else { Issue.record("unexpected \(error)"); return }
            #expect(error.detail.contains("nosuchsourceelement"))
        }
    }

    @Test("the callback form reports ok with a stream, or the failure status")
    func callbackForm() async {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<(RequestStatus, Bool), Never>) in
            UserMedia.getUserMedia(syntheticOptions()) { status, stream in
                Task {
                    await stream?.stop()
                    continuation.resume(returning: (status, stream != nil))
                }
            }
        }
        #expect(result == (.ok, true))
        var impossible = syntheticOptions()
        impossible.video.flashMode = .exact(.alwaysOn)
        let failed = await withCheckedContinuation { (continuation: CheckedContinuation<(RequestStatus, Bool), Never>) in
            UserMedia.getUserMedia(impossible) { status, stream in continuation.resume(returning: (status, stream != nil)) }
        }
        #expect(failed == (.failed, false))
    }

    @Test("a headless machine gets noDisplay, not a crash")
    func headless() async throws {
        guard ProcessInfo.processInfo.environment["DISPLAY"] == nil else { return }
        let media = try await UserMedia.getUserMedia(syntheticOptions())
        let renderer = media.mediaStream.createRenderer(RendererOptions(useNullAudioDevice: true))
        #expect(await renderer.start() == .noDisplay)
        await media.stop()
    }
}

@Suite("Constraint selection (no devices touched)")
struct ConstraintTests {
    static let camera = SourceDeviceInfo(
        id: "/dev/video9", name: "Test camera", mediaType: .video, deviceType: .physical,
        videoModes: [
            VideoMode(width: 640...640, height: 480...480, frameRates: [30...30, 15...15], format: "YUY2"),
            VideoMode(width: 1280...1280, height: 720...720, frameRates: [30...30], format: "YUY2"),
            VideoMode(width: 1920...1920, height: 1080...1080, frameRates: [30...30], format: "MJPG"),
        ],
        sourceDescription: "v4l2src device=/dev/video9")
    static let devices = [camera] + SourceDevices.builtIn(.video, environment: [:])

    func select(_ configure: (inout VideoOptions) -> Void) throws(UserMediaError) -> VideoSelection {
        var options = VideoOptions()
        configure(&options)
        return try SourceSelector.selectVideo(options, among: Self.devices)
    }

    @Test("without constraints the physical camera at its default-nearest mode")
    func defaults() throws {
        let selection = try select { _ in }
        #expect(selection.device.id == "/dev/video9")
        #expect(selection.width == 1280 && selection.height == 720 && selection.frameRate == 30)
    }

    @Test("exact height no mode has fails naming height")
    func exactUnmet() {
        #expect(throws: UserMediaError.constraintNotSatisfied(.height, "/dev/video9: no capture mode offers height exactly 900; modes: YUY2 640x480 @ 30,15; YUY2 1280x720 @ 30; MJPG 1920x1080 @ 30")) {
            try select { $0.deviceId = .exact("/dev/video9"); $0.height = .exact(900) }
        }
    }

    @Test("ideal picks the nearest mode")
    func idealNearest() throws {
        #expect(try select { $0.width = 1000 }.width == 1280)
        #expect(try select { $0.width = 700; $0.height = 500 }.width == 640)
        #expect(try select { $0.frameRate = 14 }.frameRate == 15)
        #expect(try select { $0.height = 1080 }.mode?.format == "MJPG")
    }

    @Test("min/max ranges")
    func ranges() throws {
        let selection = try select { $0.width = .between(800, 1500) }
        #expect(selection.width == 1280)
        #expect(try select { $0.width = .min(1300) }.width == 1920)
        #expect(throws: UserMediaError.self) { try select { $0.deviceId = .exact("/dev/video9"); $0.width = .between(700, 1000) } }
        #expect(throws: UserMediaError.invalidOptions("width: min 900 is above max 800")) { try select { $0.width = .between(900, 800) } }
    }

    @Test("a synthetic source scales to any size the constraints ask")
    func syntheticScales() throws {
        let selection = try select { $0.deviceId = .exact(SourceDevices.syntheticVideoId); $0.width = .exact(333); $0.height = 777; $0.frameRate = .exact(12.5) }
        #expect(selection.width == 333 && selection.height == 777 && selection.frameRate == 12.5)
        // A hard size the camera lacks falls through to a scalable source when no device is named.
        #expect(try select { $0.height = .exact(900) }.device.id == SourceDevices.syntheticVideoId)
    }

    @Test("hard flash, focus, facing and location are refused; ideal ones accepted")
    func capabilitiesLinuxLacks() throws {
        #expect(throws: UserMediaError.constraintNotSatisfied(.flashMode, "/dev/video9: has no flash")) {
            try select { $0.deviceId = .exact("/dev/video9"); $0.flashMode = .exact(.alwaysOn) }
        }
        #expect(try select { $0.flashMode = .ideal(.alwaysOn) }.device.id == "/dev/video9")
        #expect(try select { $0.flashMode = .exact(.alwaysOff) }.device.id == "/dev/video9")
        #expect(throws: UserMediaError.self) { try select { $0.deviceId = .exact("/dev/video9"); $0.autoFocus = .exact(true) } }
        #expect(try select { $0.autoFocus = .ideal(true) }.device.id == "/dev/video9")
        do {
            _ = try select { $0.facingMode = .exact(.user) }
            Issue.record("hard facing mode accepted")
        } catch {
            guard error.code == .constraintNotSatisfied, error.capability == .facingMode else { Issue.record("\(error)"); return }
        }
        #expect(try select { $0.facingMode = .ideal(.user) }.device.id == "/dev/video9")
        #expect(throws: UserMediaError.self) { try select { $0.location = .exact(.upper) } }
        #expect(throws: UserMediaError.self) { try select { $0.videoSourceRotationMode = .exact(.followUiRotation) } }
    }

    @Test("audio: echo cancellation on, automatic and off; hard on without webrtcdsp or at another rate is refused; hard polar pattern is refused")
    func audioConstraints() throws {
        let audio = SourceDevices.builtIn(.audio)
        var options = AudioOptions()
        options.echoCancelationMode = .exact(.on)
        do {
            _ = try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in false })
            Issue.record("hard echo cancellation accepted without webrtcdsp")
        } catch {
            guard error.code == .constraintNotSatisfied, error.capability == .audioEchoCancelationMode else { Issue.record("\(error)"); return }
            #expect(error.detail.contains("gstreamer1.0-plugins-bad"))
        }
        #expect(try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true }).echoCancelation)
        // Without the probe element the far end cannot be had.
        #expect(throws: UserMediaError.self) { try SourceSelector.selectAudio(options, among: audio, hasElement: { $0 == "webrtcdsp" }) }
        options.sampleRate = 44_100
        do {
            _ = try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true })
            Issue.record("hard echo cancellation accepted at 44.1 kHz")
        } catch {
            guard error.code == .constraintNotSatisfied, error.capability == .audioEchoCancelationMode else { Issue.record("\(error)"); return }
            #expect(error.detail.contains("44100"))
        }
        options.echoCancelationMode = .ideal(.on)
        #expect(try !SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true }).echoCancelation)
        options.sampleRate = 48_000
        #expect(try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true }).echoCancelation)
        #expect(try !SourceSelector.selectAudio(options, among: audio, hasElement: { _ in false }).echoCancelation)
        options.echoCancelationMode = .exact(.automatic)
        #expect(try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true }).echoCancelation)
        #expect(try !SourceSelector.selectAudio(options, among: audio, hasElement: { _ in false }).echoCancelation)
        options.echoCancelationMode = nil
        #expect(try !SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true }).echoCancelation)
        options.echoCancelationMode = .exact(.off)
        let off = try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true })
        #expect(!off.echoCancelation)
        #expect(off.device.id == SourceDevices.syntheticAudioId)
        options.polarPattern = .exact(.cardioid)
        do {
            _ = try SourceSelector.selectAudio(options, among: audio, hasElement: { _ in true })
            Issue.record("hard polar pattern accepted")
        } catch {
            guard error.code == .constraintNotSatisfied, error.capability == .polarPattern else { Issue.record("\(error)"); return }
        }
    }

    @Test("a missing device id is not-found; a device opened twice is a conflict")
    func missingAndBusy() throws {
        #expect(throws: UserMediaError.deviceNotFound("/dev/video0")) { try select { $0.deviceId = .exact("/dev/video0") } }
        try DevicesInUse.claim(Self.camera)
        defer { DevicesInUse.release(Self.camera) }
        do {
            try DevicesInUse.claim(Self.camera)
            Issue.record("claimed twice")
        } catch {
            #expect(error == .deviceBusy("/dev/video9"))
            #expect(error.status == .conflict)
        }
        let busy = StreamError(domain: "gst-resource-error-quark", code: 4, message: "Device '/dev/video9' is busy", debug: nil, source: "v4l2src0")
        #expect(UserMediaError.from(busy, device: Self.camera).status == .conflict)
    }

    @Test("device capture modes are read from GStreamer caps")
    func modesFromCaps() throws {
        let caps = try Caps("video/x-raw, format=(string)YUY2, width=(int)640, height=(int)480, framerate=(fraction){ 30/1, 15/1 }; image/jpeg, width=(int)1280, height=(int)720, framerate=(fraction)30/1; video/x-raw, format=(string)NV12, width=(int)[ 16, 4096 ], height=(int)[ 16, 2160 ], framerate=(fraction)[ 0/1, 60/1 ]")
        let modes = SourceDevices.videoModes(from: caps)
        #expect(modes.count == 3)
        #expect(modes[0] == VideoMode(width: 640...640, height: 480...480, frameRates: [30...30, 15...15], format: "YUY2"))
        #expect(modes[1].format == "MJPG" && modes[1].width == 1280...1280)
        #expect(modes[2].width == 16...4096 && modes[2].frameRates == [0...60])
    }
}
