import Foundation
@testable import PCast
import PCastNode
import PCastServer
import PCastTestSupport
import Testing

/// An mp4 the test makes itself with GStreamer's own encoders (nothing from outside the repository).
struct TestClip {
    enum Profile: String { case baseline, high }
    var width: Int
    var height: Int
    var fps: Int
    var profile: Profile
    var audio: Bool
    var seconds = 4

    /// Writes the clip into `directory` and returns its path.
    func make(in directory: URL) async throws -> String {
        let path = directory.appendingPathComponent("clip-\(width)x\(height)-\(fps)-\(profile.rawValue)\(audio ? "-av" : "").mp4").path
        var arguments = ["-q", "videotestsrc", "num-buffers=\(seconds * fps)", "pattern=ball", "!",
                         "video/x-raw,width=\(width),height=\(height),framerate=\(fps)/1", "!", "x264enc", "key-int-max=\(fps)", "!",
                         "video/x-h264,profile=\(profile.rawValue)", "!", "h264parse", "!", "mp4mux", "name=mux", "!", "filesink", "location=\(path)"]
        if audio {
            arguments += ["audiotestsrc", "num-buffers=\(seconds * 48_000 / 1024)", "samplesperbuffer=1024", "!", "audio/x-raw,rate=48000,channels=2",
                          "!", "avenc_aac", "!", "aacparse", "!", "mux."]
        }
        let process = try ChildProcess.spawn(try executable("gst-launch-1.0"), arguments, environment: ProcessInfo.processInfo.environment)
        guard await eventually(.seconds(60), { !process.isRunning }) else {
            process.stop()
            throw StandInFailure(description: "gst-launch-1.0 did not finish making \(path)")
        }
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        guard size > 10_000 else { throw StandInFailure(description: "gst-launch-1.0 made no clip at \(path) (\(size) bytes)") }
        return path
    }
}

func temporaryFolder(_ name: String) throws -> URL {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory
}

extension OneAtATime {
    /// The source kinds the CLI's `--source` and `UserMediaOptions` take — the test pattern, the null
    /// source, files, http and rtsp URIs, gst-launch descriptions, the X screen and a PulseAudio
    /// microphone stand-in — published through the platform and decoded by a subscriber at the size
    /// asked for. A capture device chosen by its id from `enumerateSourceDevices` is not among them
    /// (the machine has no camera; `UserMediaTests` enumerates the stand-ins).
    @Suite("Every advertised source publishes through the platform", .serialized)
    struct SourcePublishTests {
        /// Publishes what `options` captures and returns the frames a subscriber decoded in `seconds`
        /// (after the first), and how the stream ended if it did.
        func publishAndWatch(_ options: UserMediaOptions, seconds: Double = 2, platform given: LocalPlatform? = nil)
            async throws -> (frames: [Dimensions], ended: MediaStreamEndReason?) {
            let platform: LocalPlatform
            if let given { platform = given } else { platform = try await LocalPlatform.start() }
            let publisherClient = try await client(platform)
            let media = try await UserMedia.getUserMedia(options)
            let publisher = try await publisherClient.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let (viewer, stream, renderer, frames) = try await watchFrames(platform, publisher.streamId)
            #expect(await eventually(.seconds(10)) { !frames.all.isEmpty }, "no frame decoded")
            let counted = frames.all.count
            try await Task.sleep(for: .seconds(seconds))
            let window = Array(frames.all.dropFirst(counted))
            let ended = stream.endReason
            _ = renderer
            await viewer.stop()
            await publisher.stop()
            await media.stop()
            await publisherClient.stop()
            if given == nil { await platform.shutdown() }
            return (window, ended)
        }

        func video(_ source: MediaSourceOverride?, width: Int, height: Int, fps: Double, audio: MediaSourceOverride? = nil, audioEnabled: Bool = false) -> UserMediaOptions {
            var options = UserMediaOptions()
            if let source { options.video.source = source } else { options.video.deviceId = .exact(SourceDevices.syntheticVideoId) }
            options.video.width = .exact(width)
            options.video.height = .exact(height)
            options.video.frameRate = .exact(fps)
            options.audio.enabled = audioEnabled || audio != nil
            if let audio { options.audio.source = audio }
            return options
        }

        /// At the asked size, and about the asked rate (a 2 s window, loose for a loaded machine).
        func expectPlayed(_ frames: [Dimensions], width: Int, height: Int, fps: Double, seconds: Double = 2) {
            #expect(!frames.isEmpty)
            #expect(Set(frames) == [Dimensions(width: width, height: height)], "\(Set(frames))")
            let rate = Double(frames.count) / seconds
            #expect(rate >= fps * 0.6 && rate <= fps * 1.25, "decoded \(frames.count) frames in \(seconds) s at \(fps) fps")
        }

        @Test("the test pattern and the null source")
        func syntheticSources() async throws {
            let test = try await publishAndWatch(video(nil, width: 640, height: 360, fps: 30))
            expectPlayed(test.frames, width: 640, height: 360, fps: 30)
            var null = video(nil, width: 320, height: 240, fps: 15)
            null.video.deviceId = .exact(SourceDevices.nullVideoId)
            let black = try await publishAndWatch(null)
            expectPlayed(black.frames, width: 320, height: 240, fps: 15)
        }

        @Test("file URIs of several shapes play at real-time pace at the asked size: video only 25 fps High, video + audio 30 fps Baseline at an odd size")
        func fileURIs() async throws {
            let directory = try temporaryFolder("pcast-clips")
            defer { try? FileManager.default.removeItem(at: directory) }
            let high = try await TestClip(width: 640, height: 272, fps: 25, profile: .high, audio: false).make(in: directory)
            let played = try await publishAndWatch(video(.uri("file://\(high)"), width: 640, height: 272, fps: 25))
            expectPlayed(played.frames, width: 640, height: 272, fps: 25)
            #expect(played.ended == nil, "a 4 s clip ended within 3 s: it did not play at real-time pace")

            let odd = try await TestClip(width: 322, height: 182, fps: 30, profile: .baseline, audio: true).make(in: directory)
            let scaled = try await publishAndWatch(video(.uri("file://\(odd)"), width: 480, height: 270, fps: 30, audio: .uri("file://\(odd)")))
            expectPlayed(scaled.frames, width: 480, height: 270, fps: 30)
            // Rate-converted: a 25 fps file asked for at 15 fps.
            let slower = try await publishAndWatch(video(.uri("file://\(high)"), width: 320, height: 136, fps: 15))
            expectPlayed(slower.frames, width: 320, height: 136, fps: 15)
        }

        @Test("a file's end ends the stream as ended")
        func fileEnds() async throws {
            let directory = try temporaryFolder("pcast-clips")
            defer { try? FileManager.default.removeItem(at: directory) }
            var short = TestClip(width: 320, height: 240, fps: 25, profile: .baseline, audio: true)
            short.seconds = 3
            let path = try await short.make(in: directory)
            let played = try await publishAndWatch(video(.uri("file://\(path)"), width: 320, height: 240, fps: 25, audio: .uri("file://\(path)")), seconds: 5)
            guard case .remote(let reason, _)? = played.ended else {
                Issue.record("the stream did not end with the file: \(String(describing: played.ended))")
                return
            }
            #expect(reason == .ended)
            #expect(played.frames.count >= 20, "\(played.frames.count) frames before the end")
        }

        @Test("a looping file plays on past its end at real-time pace")
        func fileLoops() async throws {
            let directory = try temporaryFolder("pcast-clips")
            defer { try? FileManager.default.removeItem(at: directory) }
            var short = TestClip(width: 320, height: 240, fps: 25, profile: .baseline, audio: true)
            short.seconds = 2
            let path = try await short.make(in: directory)
            var options = video(.uri("file://\(path)"), width: 320, height: 240, fps: 25, audio: .uri("file://\(path)"))
            options.video.loop = true
            options.audio.loop = true
            // Watched for 5 s of a 2 s clip.
            let played = try await publishAndWatch(options, seconds: 5)
            #expect(played.ended == nil, "the looping stream ended: \(String(describing: played.ended))")
            expectPlayed(played.frames, width: 320, height: 240, fps: 25, seconds: 5)
        }

        @Test("a looping http URI (nginx) plays three passes of a 2 s clip: a viewer decodes on past each end without a gap over 300 ms, at real-time pace")
        func httpLoops() async throws {
            let directory = try temporaryFolder("pcast-clips")
            defer { try? FileManager.default.removeItem(at: directory) }
            var short = TestClip(width: 320, height: 240, fps: 25, profile: .baseline, audio: true)
            short.seconds = 2
            let path = try await short.make(in: directory)
            let http = try StaticHTTPServer.start(directory: directory.path)
            defer { http.stop() }
            let url = http.url((path as NSString).lastPathComponent)
            var options = video(.uri(url), width: 320, height: 240, fps: 25, audio: .uri(url))
            options.video.loop = true
            options.audio.loop = true
            let platform = try await LocalPlatform.start()
            let publisherClient = try await client(platform)
            let media = try await UserMedia.getUserMedia(options)
            let publisher = try await publisherClient.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let (viewer, stream, renderer, frames) = try await watchFrames(platform, publisher.streamId)
            #expect(await eventually(.seconds(10)) { !frames.all.isEmpty }, "no frame decoded")
            // Sampled every 20 ms for 6.5 s: three passes and more; the longest stretch without a new frame.
            let started = ContinuousClock.now
            var last = (count: frames.all.count, at: started)
            var longest = Duration.zero
            while ContinuousClock.now - started < .milliseconds(6_500) {
                try await Task.sleep(for: .milliseconds(20))
                let count = frames.all.count
                if count != last.count { last = (count, .now) }
                longest = max(longest, ContinuousClock.now - last.at)
            }
            let decoded = frames.all.count
            #expect(stream.endReason == nil, "the looping stream ended: \(String(describing: stream.endReason))")
            #expect(longest < .milliseconds(300), "a gap of \(longest) without a frame")
            #expect(Double(decoded) >= 25 * 6.5 * 0.6, "\(decoded) frames in 6.5 s of a looping 2 s clip at 25 fps")
            _ = renderer
            await viewer.stop()
            await publisher.stop()
            await media.stop()
            await publisherClient.stop()
            await platform.shutdown()
        }

        @Test("an http URI (nginx) and an rtsp URI (GStreamer's RTSP server) publish at the asked size")
        func networkURIs() async throws {
            let directory = try temporaryFolder("pcast-clips")
            defer { try? FileManager.default.removeItem(at: directory) }
            var long = TestClip(width: 640, height: 360, fps: 25, profile: .high, audio: true)
            long.seconds = 10
            let path = try await long.make(in: directory)
            let http = try StaticHTTPServer.start(directory: directory.path)
            defer { http.stop() }
            let viaHTTP = try await publishAndWatch(video(.uri(http.url((path as NSString).lastPathComponent)), width: 480, height: 270, fps: 25))
            expectPlayed(viaHTTP.frames, width: 480, height: 270, fps: 25)
            let rtsp = try RTSPMediaServer.start(file: path)
            defer { rtsp.stop() }
            let viaRTSP = try await publishAndWatch(video(.uri(rtsp.url), width: 640, height: 360, fps: 25))
            expectPlayed(viaRTSP.frames, width: 640, height: 360, fps: 25)
        }

        @Test("a gst-launch description that is not live plays at real-time pace")
        func description() async throws {
            let played = try await publishAndWatch(video(.pipeline("videotestsrc pattern=ball"), width: 320, height: 240, fps: 30))
            expectPlayed(played.frames, width: 320, height: 240, fps: 30)
        }

        @Test("the X screen (Xvfb) and a PulseAudio microphone stand-in publish")
        func screenAndMicrophone() async throws {
            let display = try XvfbServer.start(width: 800, height: 600)
            defer { display.stop() }
            let pulse = try PulseAudioServer.start()
            defer { pulse.stop() }
            let options = video(.pipeline("ximagesrc display-name=\(display.name) use-damage=false show-pointer=false"), width: 640, height: 480, fps: 15,
                                audio: .pipeline("pulsesrc server=unix:\(pulse.socket) device=pcast_null.monitor"))
            let played = try await publishAndWatch(options)
            expectPlayed(played.frames, width: 640, height: 480, fps: 15)
        }

        @Test("screen sharing: getUserMedia with the screen source of an Xvfb display showing a red window is a system-output track; published, a viewer decodes red frames at the asked size; a bad display name, the screen as audio and a display that is not there are typed errors")
        func screenSharing() async throws {
            let display = try XvfbServer.start(width: 800, height: 600)
            // A red window over the whole screen (no window manager: it maps at 0,0), drawn by a
            // process of its own: Xlib ends a process whose X server goes away under it.
            let window = try ChildProcess.spawn(try executable("gst-launch-1.0"), [
                "videotestsrc", "is-live=true", "pattern=red", "!", "video/x-raw,width=800,height=600,framerate=15/1", "!",
                "ximagesink", "display=\(display.name)"], environment: ProcessInfo.processInfo.environment)
            var failure: (any Error)?
            do { try await shareScreen(display) } catch { failure = error }
            window.stop()
            display.stop()
            if let failure { throw failure }
        }

        /// The screen test's body: every capture of `display` is stopped before it returns or throws.
        func shareScreen(_ display: XvfbServer) async throws {
            try await Task.sleep(for: .milliseconds(500))
            let options = video(.screen(display: display.name), width: 640, height: 480, fps: 15)
            let platform = try await LocalPlatform.start()
            let publisherClient = try await client(platform)
            let media = try await UserMedia.getUserMedia(options)
            var failure: (any Error)?
            do {
                #expect(media.mediaStream.getVideoTracks().first?.source?.deviceType == .systemOutput)
                #expect(media.mediaStream.getVideoTracks().first?.source?.id == "screen:\(display.name)")
                let publisher = try await publisherClient.publish(streamToken: try platform.token(.publish), mediaStream: media)
                let viewer = try await client(platform)
                let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
                let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
                #expect(await renderer.start() == .ok)
                // A pixel a quarter in from the top left of each decoded frame (the pointer is at
                // the centre), as (Y, U, V).
                let samples = Values<(Int, Int, Int, Int, Int)>()
                try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
                    guard case .video(let frame)? = try? notification.read(), frame.format == .i420 else { return }
                    let sample = try? frame.withUnsafeBytes { bytes -> (Int, Int, Int) in
                        let y = bytes[frame.planeOffsets[0] + frame.height / 4 * frame.strides[0] + frame.width / 4]
                        let u = bytes[frame.planeOffsets[1] + frame.height / 8 * frame.strides[1] + frame.width / 8]
                        let v = bytes[frame.planeOffsets[2] + frame.height / 8 * frame.strides[2] + frame.width / 8]
                        return (Int(y), Int(u), Int(v))
                    }
                    if let sample { samples.append((frame.width, frame.height, sample.0, sample.1, sample.2)) }
                }
                #expect(await eventually(.seconds(15)) { samples.all.count >= 15 }, "decoded frames of the screen")
                let last = samples.all.suffix(5)
                #expect(last.allSatisfy { $0.0 == 640 && $0.1 == 480 }, "\(last.map { "\($0.0)x\($0.1)" })")
                // BT.601 red is Y 81, U 90, V 240.
                #expect(last.allSatisfy { abs($0.2 - 81) < 25 && abs($0.3 - 90) < 25 && abs($0.4 - 240) < 25 },
                        "the screen's red window: \(last.map { "Y\($0.2) U\($0.3) V\($0.4)" })")
                await renderer.stop()
                await viewer.stop()
                await publisher.stop()
            } catch {
                failure = error
            }
            await media.stop()
            await publisherClient.stop()
            await platform.shutdown()
            if let failure { throw failure }

            var audio = UserMediaOptions()
            audio.video.enabled = false
            audio.audio.source = .screen(display: display.name)
            for (bad, code) in [(video(.screen(display: ":0 ! filesink location=/tmp/x"), width: 320, height: 240, fps: 15), UserMediaError.Code.invalidOptions),
                                (audio, .invalidOptions), (video(.screen(display: ":87"), width: 320, height: 240, fps: 15), .sourceFailed)] {
                let begun = ContinuousClock.now
                do throws(UserMediaError) {
                    let media = try await UserMedia.getUserMedia(bad)
                    Issue.record("\(bad) gave a stream")
                    await media.stop()
                } catch {
                    #expect(error.code == code, "\(error)")
                }
                #expect(ContinuousClock.now - begun < .seconds(15))
            }
        }

        @Test("a source that gives nothing is a typed error, not a silent stream: text as a file, a description that never emits")
        func sourcesThatGiveNothing() async throws {
            let directory = try temporaryFolder("pcast-clips")
            defer { try? FileManager.default.removeItem(at: directory) }
            let text = directory.appendingPathComponent("not-a-clip.mp4")
            try Data(String(repeating: "not media\n", count: 2000).utf8).write(to: text)
            for source in [MediaSourceOverride.uri("file://\(text.path)"), .pipeline("videotestsrc is-live=true ! valve drop=true")] {
                let begun = ContinuousClock.now
                do throws(UserMediaError) {
                    let media = try await UserMedia.getUserMedia(video(source, width: 320, height: 240, fps: 25))
                    Issue.record("\(source) gave a stream")
                    await media.stop()
                } catch {
                    #expect(!error.description.isEmpty)
                }
                #expect(ContinuousClock.now - begun < .seconds(15))
            }
        }
    }
}
