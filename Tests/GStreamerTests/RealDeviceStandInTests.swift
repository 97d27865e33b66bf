import Foundation
import GStreamer
import Testing

/// The real-device paths on real stand-ins: a PulseAudio server with a null sink (its monitor is a
/// capture device) and an Xvfb display for screen capture. scripts/setup.sh installs both; their
/// absence fails these tests.
@Suite("Real device stand-ins", .serialized)
struct RealDeviceStandInTests {
    @Test("the device monitor lists a PulseAudio null sink's monitor, and it captures audio")
    func pulseAudioMonitor() async throws {
        let server = try PulseAudioServer.start()
        defer { server.stop() }
        setenv("PULSE_SERVER", "unix:\(server.socket)", 1)
        defer { unsetenv("PULSE_SERVER") }

        let devices = await DeviceMonitor.sources([.audio])
        // The device whose element captures from the null sink's monitor.
        let monitor = try #require(devices.first { device in
            (try? device.makeElement().property("device", as: String.self)) == "pcast_null.monitor"
        }, "no capture device for the null sink among \(devices.map(\.displayName))")
        #expect(monitor.kind == .audio)
        #expect(monitor.deviceClass.hasPrefix("Audio/Source"))
        #expect(monitor.caps.map { $0.canIntersect(try! Caps("audio/x-raw")) } == true)
        #expect(try monitor.makeElement().factoryName == "pulsesrc")

        let pipeline = try Pipeline(description: "pulsesrc device=pcast_null.monitor num-buffers=10 ! audio/x-raw,format=S16LE,rate=48000,channels=2 ! fakesink name=sink sync=false")
        let counter = try pipeline.element(named: "sink").staticPad("sink").countBuffers()
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        #expect(counter.value == 10)
        await pipeline.stop()
    }

    @Test("screen capture from an Xvfb display delivers frames of the screen's size")
    func screenCapture() async throws {
        let display = try XvfbServer.start(width: 640, height: 480)
        defer { display.stop() }
        // fakesink, not appsink: GStreamer 1.22's ximagesrc spins without producing into an appsink
        // (gst-launch-1.0 shows the same), so sizes are read from the sink pad's caps.
        let pipeline = try Pipeline(description: "ximagesrc display-name=\(display.name) num-buffers=3 use-damage=false ! videoconvert ! video/x-raw,format=I420 ! fakesink name=sink sync=false")
        let pad = try pipeline.element(named: "sink").staticPad("sink")
        let counter = pad.countBuffers()
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(10))
        let info = try #require(pad.currentCaps?.videoInfo)
        #expect(counter.value == 3)
        #expect(info.width == 640 && info.height == 480)
        await pipeline.stop()
    }
}

/// A private PulseAudio server with one null sink, on a socket in a temporary directory.
struct PulseAudioServer {
    let process: Process
    let directory: URL
    var socket: String { directory.appendingPathComponent("pulse.sock").path }

    static func start() throws -> PulseAudioServer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-pulse-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = try executable("pulseaudio")
        let socket = directory.appendingPathComponent("pulse.sock").path
        process.arguments = ["-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm=true",
                             "--load=module-native-protocol-unix auth-anonymous=1 socket=\(socket)",
                             "--load=module-null-sink sink_name=pcast_null"]
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_RUNTIME_DIR"] = directory.path
        environment["HOME"] = directory.path
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        try waitFor(path: socket, process: process, what: "PulseAudio")
        return PulseAudioServer(process: process, directory: directory)
    }

    func stop() {
        stopChild(process)
        try? FileManager.default.removeItem(at: directory)
    }
}

struct StandInFailure: Error, CustomStringConvertible {
    let description: String
}

func executable(_ name: String) throws -> URL {
    for directory in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let url = URL(fileURLWithPath: directory).appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    throw StandInFailure(description: "\(name) is not installed (scripts/setup.sh installs it)")
}

func waitFor(path: String, process: Process, what: String) throws {
    for _ in 0..<100 {
        if FileManager.default.fileExists(atPath: path) { return }
        guard process.isRunning else { throw StandInFailure(description: "\(what) exited with status \(process.terminationStatus)") }
        Thread.sleep(forTimeInterval: 0.05)
    }
    process.terminate()
    throw StandInFailure(description: "\(what) did not come up within 5 s")
}

/// Stops a stand-in server. SIGKILL, because a child started from a thread of this process may
/// inherit a signal mask with SIGTERM blocked, and then `terminate()` never ends it.
func stopChild(_ process: Process) {
    guard process.isRunning else { return }
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
}

/// A private X display.
struct XvfbServer {
    let process: Process
    let name: String

    static func start(width: Int, height: Int) throws -> XvfbServer {
        // Pick a display number nobody holds (a stale lock file means it is taken).
        let number = try (100..<600).shuffled().first { !FileManager.default.fileExists(atPath: "/tmp/.X\($0)-lock") }
            .map { $0 } ?? { throw StandInFailure(description: "no free X display number") }()
        let process = Process()
        process.executableURL = try executable("Xvfb")
        process.arguments = [":\(number)", "-screen", "0", "\(width)x\(height)x24", "-nolisten", "tcp"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        try waitFor(path: "/tmp/.X11-unix/X\(number)", process: process, what: "Xvfb")
        return XvfbServer(process: process, name: ":\(number)")
    }

    func stop() { stopChild(process) }
}
