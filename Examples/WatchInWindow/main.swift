import Foundation
import PCast
import Synchronization

// A desktop viewer: subscribes to a stream with a stream token and shows it in a window of its own
// on the X display (`DISPLAY`), with its audio on the default output, until the stream ends, the
// seconds given run out or Ctrl-C. It prints the window's X id once the window exists, then a line
// a second with the frames shown and their size.
//
//   DISPLAY=:0 PCAST_SERVER=ws://127.0.0.1:8080/ws PCAST_AUTH_TOKEN=… PCAST_STREAM_TOKEN=… \
//     swift run WatchInWindow [seconds]
//
// Exits 0 when it showed at least one frame, 1 otherwise (2 for a missing setting).

/// A line on standard output at once (print's output waits in a buffer when it goes to a file or pipe).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func setting(_ name: String) -> String {
    guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
        FileHandle.standardError.write(Data("error: set \(name)\n".utf8))
        exit(2)
    }
    return value
}

let seconds = CommandLine.arguments.dropFirst().first.flatMap(Double.init)
// PCAST_AUDIO=off for a machine without a sound server.
let audioOff = ProcessInfo.processInfo.environment["PCAST_AUDIO"] == "off"
let sdk = PCast(PCastOptions(uri: setting("PCAST_SERVER")))
do {
    try await sdk.start(authToken: setting("PCAST_AUTH_TOKEN"))
    let stream = try await sdk.subscribe(streamToken: setting("PCAST_STREAM_TOKEN"))
    let renderer = stream.createRenderer(RendererOptions(useNullAudioDevice: audioOff))

    // The window the video sink made: what an application would move, raise or embed.
    renderer.setRenderSurfaceReadyCallback { surface in
        if case .window(let handle) = surface {
            say("window 0x\(String(handle, radix: 16))")
        }
    }
    let shown = Mutex(0)
    let status = await renderer.start()
    guard status == .ok else {
        say("the renderer did not start: \(status)")
        exit(1)
    }
    try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { _ in
        shown.withLock { $0 += 1 }
    }

    // Until the stream ends, or the seconds asked for pass.
    let started = ContinuousClock.now
    while stream.endReason == nil {
        if let seconds, ContinuousClock.now - started >= .seconds(seconds) { break }
        try await Task.sleep(for: .seconds(1))
        let size = renderer.videoDimensions.map { "\($0)" } ?? "no video yet"
        say("\(shown.withLock { $0 }) frames shown, \(size)")
    }
    if let reason = stream.endReason { say("stream ended: \(reason)") }
    let frames = shown.withLock { $0 }
    await renderer.stop()
    await stream.stop()
    await sdk.stop()
    exit(frames > 0 ? 0 : 1)
} catch {
    say("error: \(error)")
    exit(1)
}
