import Foundation
import PCast
import Synchronization

// A client application: publishes a 640x360 test pattern and tone to a PCast platform, watches it
// back through the platform as a viewer would, and counts the decoded frames the viewer's renderer
// shows. Exits 0 once 30 frames of the published size arrived, 1 otherwise.
//
//   PCAST_SERVER=ws://127.0.0.1:8080/ws PCAST_AUTH_TOKEN=… PCAST_PUBLISH_TOKEN=… PCAST_STREAM_TOKEN=… \
//     swift run PublishTestPattern
//
// The publish token should scope the stream to a channel (`pcast token create --type publish
// --channel-alias example`) and the stream token name the same channel, so the viewer finds it.

func setting(_ name: String) -> String {
    guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
        FileHandle.standardError.write(Data("error: set \(name)\n".utf8))
        exit(2)
    }
    return value
}

let server = setting("PCAST_SERVER")
let wanted = 30
let publisherSDK = PCast(PCastOptions(uri: server))
let viewerSDK = PCast(PCastOptions(uri: server))
do {
    try await publisherSDK.start(authToken: setting("PCAST_AUTH_TOKEN"))
    try await viewerSDK.start(authToken: setting("PCAST_AUTH_TOKEN"))

    var options = UserMediaOptions()
    options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
    options.video.width = .exact(640)
    options.video.height = .exact(360)
    options.video.frameRate = .exact(30)
    options.audio.deviceId = .exact(SourceDevices.syntheticAudioId)
    let media = try await publisherSDK.getUserMedia(options)
    let publisher = try await publisherSDK.publish(streamToken: setting("PCAST_PUBLISH_TOKEN"), mediaStream: media)
    let stream = try await viewerSDK.subscribe(streamToken: setting("PCAST_STREAM_TOKEN"))
    let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
    guard await renderer.start() == .ok else {
        print("the renderer did not start")
        exit(1)
    }

    let seen = Mutex<(frames: Int, width: Int, height: Int)>((0, 0, 0))
    try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
        guard case .video(let frame) = try? notification.read() else { return }
        seen.withLock { $0 = ($0.frames + 1, frame.width, frame.height) }
    }
    let deadline = ContinuousClock.now + .seconds(20)
    while seen.withLock({ $0.frames }) < wanted, ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(100))
    }
    let result = seen.withLock { $0 }
    print("stream \(publisher.streamId): \(result.frames) frames of \(result.width)x\(result.height) at the viewer")

    await renderer.stop()
    await stream.stop()
    await publisher.stop()
    await media.stop()
    await viewerSDK.stop()
    await publisherSDK.stop()
    exit(result.frames >= wanted && result.width == 640 && result.height == 360 ? 0 : 1)
} catch {
    print("error: \(error)")
    exit(1)
}
