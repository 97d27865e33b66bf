import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GStreamer
@testable import PCast
@testable import PCastMedia
import PCastProtocol
import PCastNode
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// What a full decode of a recording gave.
struct DecodedRecording {
    var videoTimestamps: [Duration] = []
    var audioBuffers = 0
    var width: Int?
    var height: Int?

    /// The largest step between consecutive video frames.
    var largestVideoGap: Duration {
        zip(videoTimestamps, videoTimestamps.dropFirst()).map { $1 - $0 }.max() ?? .zero
    }
}

/// Decodes every video frame (and audio, when asked) of an MP4 with qtdemux, avdec_h264 and
/// opusdec, to the end; throws when GStreamer reports an error.
func decodeRecording(_ path: String, audio: Bool) async throws -> DecodedRecording {
    var description = "filesrc location=\"\(path)\" ! qtdemux name=d d.video_0 ! queue ! h264parse ! avdec_h264 ! appsink name=video sync=false"
    if audio { description += " d.audio_0 ! queue ! opusdec ! appsink name=audio sync=false" }
    let pipeline = try Pipeline(description: description)
    let timestamps = Values<Duration>()
    let size = Mutex<(Int, Int)?>(nil)
    try pipeline.appSink(named: "video").onSample { sample in
        timestamps.append(sample.buffer.presentationTimestamp ?? .zero)
        if let info = sample.videoInfo { size.withLock { $0 = (info.width, info.height) } }
    }
    let audioCount = Atomic<Int>(0)
    if audio { try pipeline.appSink(named: "audio").onSample { _ in audioCount.add(1, ordering: .relaxed) } }
    do throws(GStreamerError) {
        try await pipeline.runToEnd(timeout: .seconds(60))
    } catch {
        throw TestFailure("decoding \(path): \(error)")
    }
    let (width, height) = size.withLock { $0 } ?? (0, 0)
    return DecodedRecording(videoTimestamps: timestamps.all.sorted(), audioBuffers: audioCount.load(ordering: .relaxed), width: width, height: height)
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The duration `gst-discoverer-1.0` reports for a file.
func discoveredDuration(_ path: String) throws -> Duration {
    let process = Process()
    process.executableURL = try executable("gst-discoverer-1.0")
    process.arguments = [path]
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    try process.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard let line = output.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix("Duration:") }) else {
        throw TestFailure("gst-discoverer-1.0 reported no duration for \(path):\n\(output)")
    }
    let value = line.split(separator: " ").last.map(String.init) ?? ""
    let parts = value.split(separator: ":")
    guard parts.count == 3, let hours = Double(parts[0]), let minutes = Double(parts[1]), let seconds = Double(parts[2]) else {
        throw TestFailure("cannot read the duration in '\(line)'")
    }
    return .seconds(hours * 3600 + minutes * 60 + seconds)
}

/// A 25 fps 640×360 test pattern with a tone.
func patternMediaOptions() -> UserMediaOptions {
    var options = UserMediaOptions()
    options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
    options.video.width = .exact(640)
    options.video.height = .exact(360)
    options.video.frameRate = .exact(25)
    options.audio.deviceId = .exact(SourceDevices.syntheticAudioId)
    return options
}

/// A 25 fps 640×360 test pattern with audio, published with a publish type.
func publishPattern(_ pcast: PCast, _ platform: LocalPlatform, type: PublishType, name: String) async throws -> (Publisher, UserMediaStream) {
    let media = try await UserMedia.getUserMedia(patternMediaOptions())
    let publisher = try await pcast.publish(streamToken: try platform.token(.publish, applyTags: ["channelAlias:show"], streamName: name), mediaStream: media,
                                            settings: EncodingSettings(videoBitrate: 800, keyframeInterval: 25), publishType: type, streamName: name)
    return (publisher, media)
}

/// Waits until the platform lists `name` as finished (not being recorded) and returns its entry.
func finishedRecording(_ platform: LocalPlatform, _ name: String) async throws -> [String: Any]? {
    let deadline = ContinuousClock.now + .seconds(20)
    while ContinuousClock.now < deadline {
        if let list = try? await recordingsList(platform),
           let found = list.first(where: { $0["name"] as? String == name && $0["recordingStreamId"] == nil }) {
            return found
        }
        try await Task.sleep(for: .milliseconds(100))
    }
    return nil
}

func recordingsList(_ platform: LocalPlatform) async throws -> [[String: Any]] {
    let (data, response) = try await httpGet(platform.httpURL + "/recordings", bearer: try platform.token(.auth, capabilities: ["recordings"]))
    guard response.statusCode == 200 else { throw TestFailure("GET /recordings: \(response.statusCode)") }
    let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
    return object?["recordings"] as? [[String: Any]] ?? []
}

func httpGet(_ url: String, bearer: String? = nil, headers: [String: String] = [:]) async throws -> (Data, HTTPURLResponse) {
    var request = URLRequest(url: URL(string: url)!)
    if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    let (data, response) = try await URLSession.shared.data(for: request)
    guard let http = response as? HTTPURLResponse else { throw TestFailure("not an HTTP response") }
    return (data, http)
}

extension OneAtATime {
    @Suite("Recording: publish types live / record / append", .serialized)
    struct RecordingTests {
        @Test("record → stop → append: one recording whose duration is the sum of both parts within a frame, playing end to end without a gap")
        func recordThenAppend() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let path = platform.configuration.recordingsDirectory + "/show.mp4"
            let frame = Duration.milliseconds(40)

            let (first, firstMedia) = try await publishPattern(pcast, platform, type: .record, name: "show")
            try await Task.sleep(for: .seconds(3))
            await first.stop()
            await firstMedia.stop()
            #expect(try await finishedRecording(platform, "show") != nil)
            let copy = FileManager.default.temporaryDirectory.appendingPathComponent("part1-\(UUID().uuidString).mp4").path
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            defer { try? FileManager.default.removeItem(atPath: copy) }
            let firstDuration = try discoveredDuration(copy)
            let firstDecode = try await decodeRecording(copy, audio: true)
            #expect(firstDuration > .seconds(1.5) && firstDuration < .seconds(4), "part 1: \(firstDuration)")
            #expect(firstDecode.width == 640 && firstDecode.height == 360)
            #expect(firstDecode.audioBuffers > 0)

            // The publisher comes back after an interruption and appends.
            try await Task.sleep(for: .seconds(1))
            let (second, secondMedia) = try await publishPattern(pcast, platform, type: .append, name: "show")
            try await Task.sleep(for: .seconds(3))
            await second.stop()
            await secondMedia.stop()
            #expect(try await finishedRecording(platform, "show") != nil)
            let total = try discoveredDuration(path)
            let decoded = try await decodeRecording(path, audio: true)
            let secondFrames = decoded.videoTimestamps.count - firstDecode.videoTimestamps.count
            #expect(secondFrames > 25, "part 2 decoded \(secondFrames) frames")
            let expected = firstDuration + frame * secondFrames
            print("recording: part 1 \(firstDuration) (\(firstDecode.videoTimestamps.count) frames), total \(total) (\(decoded.videoTimestamps.count) frames), expected \(expected), largest gap \(decoded.largestVideoGap)")
            #expect(abs((total - expected) / .milliseconds(1)) <= 40, "total \(total), part 1 \(firstDuration) + \(secondFrames) frames")
            // Continuous: the interruption left no hole in the timeline.
            #expect(decoded.largestVideoGap <= frame * 2, "largest gap between frames: \(decoded.largestVideoGap)")
            #expect(decoded.width == 640 && decoded.height == 360)
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("traversal and malformed stream names are refused before anything is recorded")
        func traversalNames() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            var options = UserMediaOptions()
            options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
            options.audio.enabled = false
            let media = try await UserMedia.getUserMedia(options)
            for name in ["../escape", "..", ".hidden", "/etc/passwd", "a/b", "a\\b", "%2e%2e%2fescape", "a%00b", "a\u{0}b", "show\n", String(repeating: "x", count: 129), ""] {
                let token = try platform.token(.publish)
                do throws(PCastError) {
                    let publisher = try await pcast.publish(streamToken: token, mediaStream: media, publishType: .record, streamName: name)
                    Issue.record("published with stream name \(name.debugDescription)")
                    await publisher.stop()
                } catch {
                    #expect(error.status == .badRequest, "\(name.debugDescription): \(error)")
                }
            }
            let files = (try? FileManager.default.contentsOfDirectory(atPath: platform.configuration.recordingsDirectory)) ?? []
            #expect(files.isEmpty, "\(files)")
            #expect(pcast.isOnline)
            await media.stop()
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("recordings are listed and downloaded over authenticated HTTP, with byte ranges")
        func httpEndpoints() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishPattern(pcast, platform, type: .record, name: "clip-1")
            try await Task.sleep(for: .seconds(2))
            // Listed while it records.
            let live = try await recordingsList(platform).first { $0["name"] as? String == "clip-1" }
            #expect(live?["recordingStreamId"] as? String == publisher.streamId)
            await publisher.stop()
            await media.stop()
            let entry = try #require(try await finishedRecording(platform, "clip-1"))
            let bytes = try #require(entry["bytes"] as? Int)
            #expect((entry["durationMilliseconds"] as? Int ?? 0) > 1000)
            let path = platform.configuration.recordingsDirectory + "/clip-1.mp4"
            let onDisk = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(onDisk.count == bytes)

            let base = platform.httpURL + "/recordings"
            let token = try platform.token(.auth, capabilities: ["recordings"])
            // Refused: no credentials, a token without the capability, a forged or expired one.
            for bearer in [nil, try platform.token(.auth), "forged", try platform.token(.auth, lifetime: -10, capabilities: ["recordings"])] {
                #expect(try await httpGet(base, bearer: bearer).1.statusCode == 401)
                #expect(try await httpGet(base + "/clip-1", bearer: bearer).1.statusCode == 401)
            }
            let (whole, wholeResponse) = try await httpGet(base + "/clip-1.mp4", bearer: token)
            #expect(wholeResponse.statusCode == 200)
            #expect(whole == onDisk)
            #expect(wholeResponse.value(forHTTPHeaderField: "Content-Type") == "video/mp4")
            let (part, partResponse) = try await httpGet(base + "/clip-1", bearer: token, headers: ["Range": "bytes=4-11"])
            #expect(partResponse.statusCode == 206)
            #expect(part == onDisk.subdata(in: 4..<12))
            #expect(String(decoding: part.prefix(4), as: UTF8.self) == "ftyp")
            #expect(partResponse.value(forHTTPHeaderField: "Content-Range") == "bytes 4-11/\(bytes)")
            let (_, beyond) = try await httpGet(base + "/clip-1", bearer: token, headers: ["Range": "bytes=\(bytes + 10)-"])
            #expect(beyond.statusCode == 416)
            // The query-string form, for players that cannot set headers.
            #expect(try await httpGet(base + "/clip-1?token=\(token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")").1.statusCode == 200)
            #expect(try await httpGet(base + "/missing", bearer: token).1.statusCode == 404)
            for bad in ["..%2Fsecret", "%2e%2e", ".hidden"] {
                let status = try await httpGet(base + "/" + bad, bearer: token).1.statusCode
                #expect(status == 400 || status == 404, "\(bad): \(status)")
            }
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("an interrupted channel publisher resumes with append: the channel's viewer follows the resumed stream; the recording continues")
        func channelViewersFollowTheResumedStream() async throws {
            let platform = try await LocalPlatform.start()
            let viewer = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            _ = try await viewer.createChannel(ChannelOptions(name: "Resume", alias: "resume"))
            let viewed = Values<(RequestStatus, String?)>()
            let viewerRooms = try await viewer.joinChannel(JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "resume"))) { status, subscriber, _ in
                viewed.append((status, subscriber?.streamId))
            }
            func publish(_ type: PublishType) async throws -> (ChannelExpress, RoomService, ExpressPublisher) {
                var publishOptions = PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])
                publishOptions.publishType = type
                publishOptions.streamName = "resume"
                let express = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
                let (rooms, publisher) = try await express.publishToChannel(PublishToChannelOptions(
                    channelOptions: ChannelOptions(name: "Resume", alias: "resume"), publishOptions: publishOptions))
                return (express, rooms, publisher)
            }
            let (firstExpress, firstRooms, first) = try await publish(.record)
            #expect(await eventually { viewed.all.last?.1 == first.streamId })
            try await Task.sleep(for: .seconds(2))
            // The interruption: the publisher goes away, then comes back appending to the same name.
            await first.stop()
            await firstExpress.pcastExpress.shutdown()
            let (secondExpress, secondRooms, second) = try await publish(.append)
            #expect(await eventually { viewed.all.last?.1 == second.streamId })
            try await Task.sleep(for: .seconds(2))
            await second.stop()
            let entry = try await finishedRecording(platform, "resume")
            let duration = entry?["durationMilliseconds"] as? Int ?? 0
            #expect(duration > 3000, "the recording holds both parts: \(duration) ms")
            _ = (viewerRooms, firstRooms, secondRooms)
            for e in [viewer, secondExpress] { await e.pcastExpress.shutdown() }
            await platform.shutdown()
        }
    }
}
