import Foundation
import GStreamer
import PCastMedia
import PCastTestSupport
import Synchronization

/// CPU of capture → frame hook → x264 encode through the SDK, against the same pipeline run by
/// `gst-launch-1.0`, in the same run (alternating, median of the runs).
///
/// The SDK side is `getUserMedia` (720p30 test pattern) with a frame-ready callback that reads
/// every frame, and an encoder attached with ``MediaStream/attachConsumer(_:to:)``; CPU is this
/// process's (getrusage). The reference is `gst-launch-1.0` with the same elements and no hook;
/// its CPU is read from `/proc/PID/stat`.
public struct CaptureEncodeBenchmark: Sendable {
    public struct Result: Sendable, Hashable, Codable {
        public var seconds: Double
        public var runs: Int
        /// Percent of one core.
        public var sdkCPU: Double
        public var gstLaunchCPU: Double
        public var ratio: Double
        public var sdkFrames: Int
        public var hookDropped: Int
    }

    public var seconds: Double
    public var runs: Int
    public static let goalRatio = 1.05
    static let encoder = "x264enc tune=zerolatency speed-preset=ultrafast bitrate=2500 key-int-max=60"

    public init(seconds: Double = 5, runs: Int = 3) {
        self.seconds = seconds
        self.runs = runs
    }

    public func run() async throws -> Result {
        var sdk: [Double] = [], reference: [Double] = []
        var frames = 0, dropped = 0
        for _ in 0..<runs {
            let measured = try await runSDK()
            sdk.append(measured.cpu)
            frames += measured.frames
            dropped += measured.dropped
            reference.append(try await runGstLaunch())
        }
        let sdkMedian = sdk.sorted()[sdk.count / 2], referenceMedian = reference.sorted()[reference.count / 2]
        return Result(seconds: seconds, runs: runs, sdkCPU: sdkMedian, gstLaunchCPU: referenceMedian,
                      ratio: referenceMedian > 0 ? sdkMedian / referenceMedian : 0, sdkFrames: frames / runs, hookDropped: dropped)
    }

    package static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    func runSDK() async throws -> (cpu: Double, frames: Int, dropped: Int) {
        let media = try await UserMedia.getUserMedia(.synthetic(width: 1280, height: 720, audio: false))
        let track = media.mediaStream.getVideoTracks()[0]
        let frames = Atomic<Int>(0)
        try media.setFrameReadyCallback(track) { notification in
            if (try? notification.read()) != nil { frames.add(1, ordering: .relaxed) }
        }
        let consumer = try await media.mediaStream.attachConsumer("queue ! \(Self.encoder) ! fakesink sync=false", to: .video)
        try await Task.sleep(for: .seconds(1))   // warm up: encoder start, caps
        let start = Self.processCPUSeconds(), wall = ContinuousClock.now
        let framesBefore = frames.load(ordering: .relaxed)
        try await Task.sleep(for: .seconds(seconds))
        let cpu = Self.processCPUSeconds() - start
        let elapsed = wall.duration(to: .now)
        let counted = frames.load(ordering: .relaxed) - framesBefore
        let dropped = media.frameStatistics(track)?.framesDroppedLate ?? 0
        await consumer.detach()
        await media.stop()
        return (100 * cpu / elapsed.seconds, counted, dropped)
    }

    func runGstLaunch() async throws -> Double {
        let description = "videotestsrc is-live=true pattern=smpte ! videoconvert ! videoscale ! videorate ! capsfilter caps=video/x-raw,format=I420,width=1280,height=720,framerate=30/1,pixel-aspect-ratio=1/1 ! identity ! tee name=t allow-not-linked=true ! queue leaky=downstream max-size-buffers=2 ! fakesink sync=true async=false t. ! queue ! \(Self.encoder) ! fakesink sync=false"
        let process = try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/gst-launch-1.0"),
                                             ["-q"] + description.split(separator: " ").map(String.init),
                                             environment: ProcessInfo.processInfo.environment)
        defer { process.stop() }
        try await Task.sleep(for: .seconds(1))
        let start = Self.childCPUSeconds(process.pid), wall = ContinuousClock.now
        try await Task.sleep(for: .seconds(seconds))
        let cpu = Self.childCPUSeconds(process.pid) - start
        return 100 * cpu / wall.duration(to: .now).seconds
    }

    /// utime + stime of a process, from /proc/PID/stat.
    static func childCPUSeconds(_ pid: Int32) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the command: state is field 3 (index 0 here); utime 14 and stime 15 (1-based).
        guard fields.count > 13, let utime = Double(fields[11]), let stime = Double(fields[12]) else { return 0 }
        return (utime + stime) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

extension Duration {
    var seconds: Double {
        let (s, a) = components
        return Double(s) + Double(a) / 1e18
    }
}
