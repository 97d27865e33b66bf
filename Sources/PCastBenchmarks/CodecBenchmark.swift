import Foundation
import GStreamer
import PCastMedia
import PCastTestSupport

/// What each video codec costs for the same picture quality: the SDK's own encoder settings
/// (``VideoCodec``: x264 zerolatency/ultrafast, libvpx at its real-time deadline, libaom at its
/// real-time usage) on one 10 s 720p30 clip (ffmpeg's `testsrc2`: moving shapes, text and a
/// gradient), at a ladder of bitrates. For each point: the bitrate the encoder really produced, the
/// SSIM of the decoded clip against the source (ffmpeg's `ssim` filter, not ours), and the encode
/// CPU (this process's getrusage over the encode, which runs as fast as it can: CPU seconds per
/// second of video, as % of one core at 30 fps). From the ladder, by log-linear interpolation: the
/// bitrate each codec needs for an SSIM of ``targetSSIM`` and its encode CPU there, against H.264
/// in the same run. CPU is the median of `runs` encodes of each point, with their spread.
public struct CodecBenchmark: Sendable {
    public struct Point: Sendable, Hashable, Codable {
        public var requestedKbps: Int
        public var producedKbps: Double
        public var ssim: Double
        /// Median, minimum and maximum over the runs: % of one core for real-time 30 fps.
        public var encodeCPU: Double
        public var encodeCPUMin: Double
        public var encodeCPUMax: Double
    }

    public struct CodecResult: Sendable, Hashable, Codable {
        public var codec: String
        public var points: [Point]
        /// Interpolated at the target SSIM; nil when the ladder does not reach it or starts above it.
        public var kbpsAtTarget: Double?
        public var encodeCPUAtTarget: Double?
        /// Against H.264's, in the same run.
        public var bitrateRatioToH264: Double?
        public var cpuRatioToH264: Double?
    }

    public struct Result: Sendable, Hashable, Codable {
        public var clip: String
        public var runs: Int
        public var targetSSIM: Double
        public var codecs: [CodecResult]
    }

    public static let targetSSIM = 0.95
    public static let clip = "ffmpeg testsrc2, 1280×720, 30 fps, 10 s"
    public var ladder: [Int]
    public var runs: Int
    public var codecs: [VideoCodec]

    public init(ladder: [Int] = [250, 500, 1000, 2000, 4000], runs: Int = 3, codecs: [VideoCodec] = VideoCodec.allCases) {
        self.ladder = ladder
        self.runs = runs
        self.codecs = codecs
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

    public func run() async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-codecs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = directory.appendingPathComponent("source.yuv").path
        let made = try Self.tool("ffmpeg", ["-hide_banner", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=10",
                                            "-pix_fmt", "yuv420p", "-f", "rawvideo", "-y", source])
        guard made.status == 0 else { throw Failure(description: "ffmpeg could not make the clip: \(made.output)") }

        var results: [CodecResult] = []
        for codec in codecs {
            var points: [Point] = []
            for kbps in ladder {
                let encoded = directory.appendingPathComponent("\(codec.encodingName)-\(kbps).mkv").path
                var cpus: [Double] = []
                for _ in 0..<runs { cpus.append(try await encode(codec, kbps: kbps, source: source, to: encoded)) }
                let bytes = (try FileManager.default.attributesOfItem(atPath: encoded)[.size] as? Int) ?? 0
                let ssim = try Self.ssim(encoded, against: source)
                cpus.sort()
                points.append(Point(requestedKbps: kbps, producedKbps: Double(bytes) * 8 / 10 / 1000, ssim: ssim,
                                    encodeCPU: cpus[cpus.count / 2], encodeCPUMin: cpus.first ?? 0, encodeCPUMax: cpus.last ?? 0))
            }
            let (kbps, cpu) = Self.atTarget(points)
            results.append(CodecResult(codec: codec.encodingName, points: points, kbpsAtTarget: kbps, encodeCPUAtTarget: cpu))
        }
        if let h264 = results.first(where: { $0.codec == "H264" }), let kbps = h264.kbpsAtTarget, let cpu = h264.encodeCPUAtTarget {
            for index in results.indices {
                results[index].bitrateRatioToH264 = results[index].kbpsAtTarget.map { $0 / kbps }
                results[index].cpuRatioToH264 = results[index].encodeCPUAtTarget.map { $0 / cpu }
            }
        }
        return Result(clip: Self.clip, runs: runs, targetSSIM: Self.targetSSIM, codecs: results)
    }

    /// Encodes the clip at `kbps` into Matroska; the encode's CPU as % of a core at 30 fps.
    func encode(_ codec: VideoCodec, kbps: Int, source: String, to path: String) async throws -> Double {
        let encoder = codec.encoder(name: "encoder", kilobitsPerSecond: kbps, keyframeInterval: 60, burstMilliseconds: 600)
        let pipeline = try Pipeline(description: """
            filesrc location=\(source) ! rawvideoparse width=1280 height=720 format=i420 framerate=30/1 \
            ! \(encoder) ! \(Self.parser(codec))matroskamux ! filesink location=\(path)
            """)
        let start = CaptureEncodeBenchmark.processCPUSeconds()
        try await pipeline.runToEnd(timeout: .seconds(300))
        return 100 * (CaptureEncodeBenchmark.processCPUSeconds() - start) / 10
    }

    /// What puts an encoder's output in the form Matroska takes (H.264 and H.265 with their
    /// configuration records, AV1 as temporal units); VP8 and VP9 go in as they come.
    static func parser(_ codec: VideoCodec) -> String {
        switch codec {
        case .h264: "h264parse ! "
        case .h265: "h265parse ! "
        case .av1: "av1parse ! "
        case .vp8, .vp9: ""
        }
    }

    /// ffmpeg's SSIM (All) of the decoded file against the raw source.
    static func ssim(_ encoded: String, against source: String) throws -> Double {
        let run = try tool("ffmpeg", ["-hide_banner", "-i", encoded, "-f", "rawvideo", "-s", "1280x720", "-pix_fmt", "yuv420p", "-r", "30", "-i", source,
                                      "-lavfi", "[0:v][1:v]ssim", "-f", "null", "-"])
        guard let range = run.output.range(of: "All:"),
              let value = Double(run.output[range.upperBound...].prefix { "0123456789.".contains($0) }) else {
            throw Failure(description: "ffmpeg reported no SSIM for \(encoded): \(run.output.suffix(500))")
        }
        return value
    }

    /// The bitrate (log-linear between the two ladder points around it) and CPU (linear) at the target SSIM.
    static func atTarget(_ points: [Point]) -> (Double?, Double?) {
        let sorted = points.sorted { $0.producedKbps < $1.producedKbps }
        for (low, high) in zip(sorted, sorted.dropFirst()) where low.ssim < targetSSIM && high.ssim >= targetSSIM {
            let share = (targetSSIM - low.ssim) / (high.ssim - low.ssim)
            let kbps = exp(log(low.producedKbps) + share * (log(high.producedKbps) - log(low.producedKbps)))
            return (kbps, low.encodeCPU + share * (high.encodeCPU - low.encodeCPU))
        }
        return (nil, nil)
    }

    static func tool(_ name: String, _ arguments: [String]) throws -> (status: Int32?, output: String) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-\(name)-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/\(name)"), arguments, environment: ProcessInfo.processInfo.environment,
                                           output: log, errorsToOutput: true)
        let status = child.wait(within: .seconds(300))
        if status == nil { child.interrupt() }
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }
}
