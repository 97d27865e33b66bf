import GStreamer
import Testing

@Suite("Caps, buffers and devices")
struct CapsBufferDeviceTests {
    @Test("video info gives the plane layout of common formats")
    func videoLayouts() throws {
        let i420 = try VideoInfo(format: .i420, width: 1280, height: 720, frameRate: 30)
        #expect(i420.strides == [1280, 640, 640])
        #expect(i420.offsets == [0, 921_600, 1_152_000])
        #expect(i420.size == 1_382_400)
        let nv12 = try VideoInfo(format: .nv12, width: 1280, height: 720)
        #expect(nv12.planeCount == 2 && nv12.strides == [1280, 1280])
        let bgra = try VideoInfo(format: .bgra, width: 1280, height: 720)
        #expect(bgra.strides == [5120] && bgra.size == 3_686_400)
        #expect(i420.caps.videoInfo == i420)
        #expect(throws: GStreamerError.self) { try VideoInfo(format: VideoFormat(rawValue: "NOPE"), width: 1, height: 1) }
    }

    @Test("audio info reads raw audio caps")
    func audioInfo() throws {
        let info = try #require(try Caps("audio/x-raw,format=S16LE,rate=48000,channels=2,layout=interleaved").audioInfo)
        #expect(info.format == "S16LE" && info.rate == 48_000 && info.channels == 2 && info.bytesPerFrame == 4)
        #expect(info.interleaved)
    }

    @Test("caps parse, compare and refuse nonsense")
    func caps() throws {
        let caps = try Caps("video/x-raw,width=(int)64,height=(int)[ 16, 48 ]")
        #expect(caps.structures.first?.name == "video/x-raw")
        #expect(caps.structures.first?["width"] == .int(64))
        #expect(!caps.isFixed)
        #expect(caps.canIntersect(try Caps("video/x-raw")))
        #expect(throws: GStreamerError.invalidCaps("not caps ((")) { try Caps("not caps ((") }
    }

    @Test("buffers carry timestamps and flags; writes never reach other holders")
    func buffers() throws {
        let buffer = Buffer(bytes: [1, 2, 3, 4])
        #expect(buffer.presentationTimestamp == nil && buffer.duration == nil)
        buffer.presentationTimestamp = .milliseconds(33)
        buffer.duration = .nanoseconds(1)
        buffer.flags = [.deltaUnit, .marker]
        #expect(buffer.presentationTimestamp == .milliseconds(33))
        #expect(!buffer.isKeyframe && buffer.flags.contains(.marker))
        let copy = buffer.copy()
        try copy.withUnsafeMutableBytes { $0[0] = 99 }
        #expect(buffer.bytes == [1, 2, 3, 4])
        #expect(copy.bytes == [99, 2, 3, 4])
        #expect(copy.presentationTimestamp == .milliseconds(33))
        #expect(try buffer.withUnsafeBytes { $0.reduce(0) { $0 + Int($1) } } == 10)
    }

    @Test("the device monitor answers (an empty list is fine without devices)")
    func devices() async {
        let devices = await DeviceMonitor.sources()
        for device in devices {
            #expect(device.deviceClass.hasPrefix(device.kind == .video ? "Video" : "Audio"))
        }
        let videoOnly = await DeviceMonitor.sources([.video])
        #expect(videoOnly.allSatisfy { $0.kind == .video })
    }
}
