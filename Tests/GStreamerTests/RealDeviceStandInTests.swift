import Foundation
import GStreamer
import PCastTestSupport
import Testing

extension Devices {
    /// The real-device paths on real stand-ins: a PulseAudio server with a null sink (its monitor is a
    /// capture device) and an Xvfb display for screen capture. scripts/setup.sh installs both; their
    /// absence fails these tests.
    @Suite("Real device stand-ins", .serialized)
    struct RealDeviceStandInTests {
        @Test("the device monitor lists a PulseAudio null sink's monitor, and it captures audio")
        func pulseAudioMonitor() async throws {
            _ = try PulseAudioServer.shared()

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
}

