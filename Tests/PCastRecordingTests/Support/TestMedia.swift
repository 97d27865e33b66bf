// Real H.264 and Opus access units, encoded by GStreamer once per test run.
// A python3-gi appsink records each buffer's exact PTS, DTS and delta-unit flag (gst-launch's
// -v "last-message" output drops notifications, so it cannot be used to read timestamps).

import Foundation
@testable import PCastRecording

struct MediaUnit: Sendable {
    var pts: UInt64
    var dts: UInt64?
    var isKeyframe: Bool
    var data: [UInt8]

    func shifted(by offset: UInt64) -> MediaUnit {
        MediaUnit(pts: pts + offset, dts: dts.map { $0 + offset }, isKeyframe: isKeyframe, data: data)
    }
}

struct TestMedia: Sendable {
    /// 75 frames, 320x240, 25 fps, keyframe every 25, no B-frames (PTS = DTS).
    var video: [MediaUnit]
    /// 75 frames with 2 B-frames (DTS < PTS, reordered).
    var bframes: [MediaUnit]
    /// 150 Opus packets of 20 ms, 48 kHz stereo, timestamped i × 20 ms as an RTP
    /// depayloader would (opusenc's own first timestamps are shifted by its pre-skip).
    var audio: [MediaUnit]
    var videoDirectory: String
    var audioDirectory: String
    var sps: [UInt8]
    var pps: [UInt8]

    static let frame: UInt64 = 40_000_000
    static let packet: UInt64 = 20_000_000
    /// All source timestamps start here (so B-frame DTS stay positive).
    static let base: UInt64 = 1_000_000_000

    static let shared: Result<TestMedia, any Error> = Result { try generate() }
    static func load() throws -> TestMedia { try shared.get() }

    var videoTrack: FMP4Track {
        FMP4Track(id: 1, timescale: 90_000, codec: .h264(width: 320, height: 240, sps: sps, pps: pps))
    }
    var audioTrack: FMP4Track {
        FMP4Track(id: 2, timescale: 48_000, codec: .opus(channels: 2, sampleRate: 48_000, preSkip: 312))
    }

    static let videoPipeline = "videotestsrc num-buffers=75 ! video/x-raw,format=I420,width=320,height=240,framerate=25/1 "
        + "! x264enc key-int-max=25 tune=zerolatency ! h264parse "
        + "! video/x-h264,stream-format=byte-stream,alignment=au"
    static let bframePipeline = "videotestsrc num-buffers=75 pattern=ball ! video/x-raw,format=I420,width=320,height=240,framerate=25/1 "
        + "! x264enc key-int-max=25 bframes=2 ! h264parse "
        + "! video/x-h264,stream-format=byte-stream,alignment=au"
    static let audioPipeline = "audiotestsrc num-buffers=150 samplesperbuffer=960 "
        + "! audio/x-raw,rate=48000,channels=2 ! opusenc"

    static func generate() throws -> TestMedia {
        let root = try Scratch.directory("media")
        let python = try Tools.pythonWithGStreamer()
        let script = root + "/capture.py"
        try captureScript.write(toFile: script, atomically: true, encoding: .utf8)
        let video = try capture(python, script, videoPipeline, root + "/v", "v", "h264")
        let bframes = try capture(python, script, bframePipeline, root + "/b", "v", "h264")
        let audioRaw = try capture(python, script, audioPipeline, root + "/a", "a", "opus")
        guard audioRaw.count >= 150, video.count == 75, bframes.count == 75 else {
            throw ToolFailed(description: "unexpected unit counts \(video.count) \(bframes.count) \(audioRaw.count)")
        }
        // Keep exactly 150 packets (opusenc emits one more for its look-ahead) in the crash
        // writer's directory too.
        for extra in audioRaw.indices.dropFirst(150) {
            try? FileManager.default.removeItem(atPath: root + "/a/a-" + String(format: "%05d", extra) + ".opus")
        }
        let audio = audioRaw.prefix(150).enumerated().map { index, unit in
            MediaUnit(pts: base + UInt64(index) * packet, dts: nil, isKeyframe: true, data: unit.data)
        }
        let sets = H264.parameterSets(annexB: video[0].data)
        guard let sps = sets.sps, let pps = sets.pps else { throw ToolFailed(description: "no SPS/PPS in first AU") }
        return TestMedia(video: rebase(video), bframes: rebase(bframes), audio: audio,
                         videoDirectory: root + "/v", audioDirectory: root + "/a", sps: sps, pps: pps)
    }

    /// Shifts timestamps so that the first PTS is `base` (x264enc starts at 1000 hours).
    static func rebase(_ units: [MediaUnit]) -> [MediaUnit] {
        guard let first = units.first?.pts else { return units }
        return units.map { unit in
            MediaUnit(pts: unit.pts - first + base, dts: unit.dts.map { $0 + base - first },
                      isKeyframe: unit.isKeyframe, data: unit.data)
        }
    }

    static func capture(_ python: String, _ script: String, _ pipeline: String, _ directory: String,
                        _ prefix: String, _ ext: String) throws -> [MediaUnit] {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = try Tools.check(python, [script, pipeline, directory, prefix, ext])
        let manifest = try String(contentsOfFile: directory + "/manifest.txt", encoding: .utf8)
        return try manifest.split(separator: "\n").map { line in
            let fields = line.split(separator: " ").compactMap { Int64($0) }
            guard fields.count == 4 else { throw ToolFailed(description: "bad manifest line \(line)") }
            let name = directory + "/" + prefix + "-" + String(format: "%05d", fields[0]) + "." + ext
            guard let data = FileManager.default.contents(atPath: name) else {
                throw ToolFailed(description: "missing \(name)")
            }
            return MediaUnit(pts: UInt64(fields[1]), dts: fields[2] < 0 ? nil : UInt64(fields[2]),
                             isKeyframe: fields[3] == 0, data: [UInt8](data))
        }
    }

    static let captureScript = """
    import os, sys
    import gi
    gi.require_version('Gst', '1.0')
    from gi.repository import Gst
    Gst.init(None)
    desc, outdir, prefix, ext = sys.argv[1:5]
    pipeline = Gst.parse_launch(desc + ' ! appsink name=sink sync=false')
    sink = pipeline.get_by_name('sink')
    pipeline.set_state(Gst.State.PLAYING)
    none = Gst.CLOCK_TIME_NONE
    n = 0
    with open(os.path.join(outdir, 'manifest.txt'), 'w') as manifest:
        while True:
            sample = sink.emit('pull-sample')
            if sample is None:
                break
            buf = sample.get_buffer()
            data = buf.extract_dup(0, buf.get_size())
            with open(os.path.join(outdir, '%s-%05d.%s' % (prefix, n, ext)), 'wb') as f:
                f.write(data)
            pts = -1 if buf.pts == none else buf.pts
            dts = -1 if buf.dts == none else buf.dts
            delta = 1 if buf.has_flags(Gst.BufferFlags.DELTA_UNIT) else 0
            manifest.write('%d %d %d %d\\n' % (n, pts, dts, delta))
            n += 1
    error = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if error is not None or n == 0:
        sys.stderr.write('capture failed: %s\\n' % (error.parse_error()[0].message if error else 'no buffers'))
        sys.exit(1)
    """
}
