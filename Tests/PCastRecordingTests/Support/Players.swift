// Writes recordings from test media, and asks real players (GStreamer's qtdemux through
// gst-discoverer-1.0 and gst-launch-1.0, FFmpeg's ffprobe/ffmpeg) what they see.

import Foundation
import Testing
@testable import PCastRecording

/// One part of a recording: which units, and how far their source timestamps are shifted.
struct Part {
    var video: [MediaUnit] = []
    var audio: [MediaUnit] = []
    /// Added to every source timestamp (an appended part may come from a restarted source).
    var shift: UInt64 = 0
}

struct Recorded {
    var startOffset: UInt64
    var warnings: [RecordingFileWarning]
    var fragments: Int
    var durationNanoseconds: UInt64
    var trackIDs: [UInt32]
}

enum Recorder {
    /// Creates (or appends to) `path` with `tracks`, feeding `part` through a fragmenter the
    /// way the platform's recorder does.
    static func record(_ path: String, tracks: [FMP4Track], _ part: Part, append: Bool = false) throws -> Recorded {
        let file: RecordingFile
        var startOffset: UInt64 = 0
        var warnings: [RecordingFileWarning] = []
        if append {
            let appended = try RecordingFile.append(path: path, tracks: tracks)
            (file, startOffset, warnings) = (appended.file, appended.startOffset, appended.warnings)
        } else {
            file = try RecordingFile.create(path: path, tracks: tracks)
        }
        var fragmenter = FMP4Fragmenter(tracks: file.tracks, startOffset: startOffset)
        for unit in interleave(part, trackIDs: file.tracks.map(\.id)) {
            if let fragment = fragmenter.push(unit) { try file.write(fragment) }
        }
        if let fragment = fragmenter.flush() { try file.write(fragment) }
        let recorded = Recorded(startOffset: startOffset, warnings: warnings, fragments: file.fragmentsWritten,
                                durationNanoseconds: file.durationNanoseconds, trackIDs: file.tracks.map(\.id))
        try file.close()
        return recorded
    }

    /// Video (track 1) and audio (track 2) in decode-time order, audio first on ties, as
    /// they would leave two depayloaders.
    static func interleave(_ part: Part, trackIDs: [UInt32]) -> [FMP4Fragmenter.AccessUnit] {
        var units: [(time: UInt64, order: Int, unit: FMP4Fragmenter.AccessUnit)] = []
        if trackIDs.contains(1) {
            for (index, v) in part.video.enumerated() {
                let s = v.shifted(by: part.shift)
                units.append((s.dts ?? s.pts, 1_000_000 + index, .init(
                    trackID: 1, pts: s.pts, dts: s.dts, isKeyframe: s.isKeyframe,
                    data: H264.lengthPrefixed(annexB: s.data))))
            }
        }
        if trackIDs.contains(2) {
            for (index, a) in part.audio.enumerated() {
                let s = a.shifted(by: part.shift)
                units.append((s.pts, index, .init(trackID: 2, pts: s.pts, isKeyframe: true, data: s.data)))
            }
        }
        return units.sorted { ($0.time, $0.order) < ($1.time, $1.order) }.map(\.unit)
    }
}

struct Discovery {
    var seconds: Double
    var width: Int?
    var height: Int?
    var hasH264: Bool
    var hasOpus: Bool
    var output: String
}

struct Decoded {
    var videoFrames: Int
    var audioBuffers: Int
    var videoTimestamps: [UInt64]
    var output: String
}

enum Players {
    /// gst-discoverer-1.0 -v: duration, size, codecs.
    static func discover(_ path: String) throws -> Discovery {
        let result = try Tools.check("gst-discoverer-1.0", ["-v", path], timeout: 60)
        let out = result.output
        guard let line = out.split(separator: "\n").first(where: { $0.contains("Duration: ") }),
              let seconds = parseClock(String(line.split(separator: " ").last ?? "")) else {
            throw ToolFailed(description: "no duration in discoverer output:\n\(out)")
        }
        func intField(_ name: String) -> Int? {
            out.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(name + ": ") }
                .flatMap { Int($0.split(separator: " ").last ?? "") }
        }
        return Discovery(seconds: Double(seconds) / 1e9, width: intField("Width"), height: intField("Height"),
                         hasH264: out.contains("video/x-h264"), hasOpus: out.contains("audio/x-opus"), output: out)
    }

    /// Parses GStreamer's H:MM:SS.nnnnnnnnn into nanoseconds.
    static func parseClock(_ text: String) -> UInt64? {
        let parts = text.split(separator: ":")
        guard parts.count == 3, let h = UInt64(parts[0]), let m = UInt64(parts[1]) else { return nil }
        let sec = parts[2].split(separator: ".")
        guard sec.count == 2, let s = UInt64(sec[0]), let ns = UInt64(sec[1].prefix(9)) else { return nil }
        return ((h * 60 + m) * 60 + s) * 1_000_000_000 + ns
    }

    /// Demuxes with qtdemux and decodes every frame (avdec_h264, opusdec). Counts come from
    /// multifilesink's per-buffer bus messages (gst-launch -m), which are never coalesced.
    static func gstDecode(_ path: String, video: Bool = true, audio: Bool = true) throws -> Decoded {
        // multifilesink writes each buffer to a new file and renames it over `location`: never
        // point it at /dev/null (that replaces the device with a regular file for the whole
        // machine), but at a scratch file of this call's own.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("gst-decode-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        var args = ["-m", "filesrc", "location=\(path)", "!", "qtdemux", "name=d"]
        if video {
            args += ["d.video_0", "!", "queue", "!", "h264parse", "!", "avdec_h264", "!",
                     "multifilesink", "name=vsink", "location=\(scratch.path)/video", "post-messages=true", "sync=false"]
        }
        if audio {
            args += ["d.audio_0", "!", "queue", "!", "opusdec", "!",
                     "multifilesink", "name=asink", "location=\(scratch.path)/audio", "post-messages=true", "sync=false"]
        }
        let result = try Tools.check("gst-launch-1.0", args, timeout: 120)
        let lines = result.output.split(separator: "\n")
        let videoLines = lines.filter { $0.contains("from element \"vsink\" (element)") }
        let timestamps = videoLines.compactMap { line -> UInt64? in
            guard let range = line.range(of: "timestamp=(guint64)") else { return nil }
            return UInt64(line[range.upperBound...].prefix { $0.isNumber })
        }
        return Decoded(videoFrames: videoLines.count,
                       audioBuffers: lines.filter { $0.contains("from element \"asink\" (element)") }.count,
                       videoTimestamps: timestamps, output: result.output)
    }

    static var hasFFprobe: Bool { Tools.isInstalled("ffprobe") }

    /// ffprobe's container duration in seconds.
    static func ffprobeDuration(_ path: String) throws -> Double {
        let r = try Tools.check("ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path])
        guard let value = Double(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw ToolFailed(description: "ffprobe duration: \(r.output)")
        }
        return value
    }

    /// Frames ffprobe decodes in `stream` ("v:0", "a:0").
    static func ffprobeFrames(_ path: String, stream: String) throws -> Int {
        let r = try Tools.check("ffprobe", ["-v", "error", "-count_frames", "-select_streams", stream,
                                            "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path])
        guard let value = Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw ToolFailed(description: "ffprobe frames: \(r.output)")
        }
        return value
    }

    /// Packet decode timestamps of `stream`, in the stream's time base, in file order.
    static func ffprobePacketDTS(_ path: String, stream: String) throws -> [Int64] {
        let r = try Tools.check("ffprobe", ["-v", "error", "-select_streams", stream,
                                            "-show_entries", "packet=dts", "-of", "csv=p=0", path])
        return r.stdout.split(separator: "\n").compactMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// Decodes everything with ffmpeg; returns its error output (empty when clean).
    static func ffmpegErrors(_ path: String) throws -> String {
        let r = try Tools.run("ffmpeg", ["-nostdin", "-v", "error", "-i", path, "-f", "null", "-"], timeout: 120)
        return r.status == 0 ? r.stderr : "exit \(r.status): \(r.stderr)"
    }
}

/// ffmpeg decodes the whole file without printing an error.
func expectCleanFFmpegDecode(_ path: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let errors = try Players.ffmpegErrors(path)
    #expect(errors.isEmpty, "ffmpeg -v error -i \(path) -f null -: \(errors)", sourceLocation: sourceLocation)
}
