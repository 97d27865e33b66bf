import Foundation
import PCastTestSupport
import Testing

extension Prerequisites {
    /// The clip the tests make for themselves (`make test` runs this first, in a process of its own,
    /// so the encode does not compete with the frame-by-frame media suites).
    @Suite struct TestMediaTests {
        @Test("the test clip is a 5.3 s 1280x720 25 fps H.264 + AAC MP4 with a single keyframe")
        func clip() async throws {
            let path = try await TestMedia.clip720p()
            let ffprobe = try executable("ffprobe")
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-clip-probe-\(UUID().uuidString).txt").path
            defer { try? FileManager.default.removeItem(atPath: output) }
            let probe = try ChildProcess.spawn(ffprobe, [
                "-v", "error", "-show_entries", "stream=codec_name,width,height,r_frame_rate:format=duration", "-of", "compact", path,
            ], environment: ProcessInfo.processInfo.environment, output: output)
            #expect(probe.wait() == 0)
            let text = try String(contentsOfFile: output, encoding: .utf8)
            #expect(text.contains("codec_name=h264|width=1280|height=720|r_frame_rate=25/1"), "\(text)")
            #expect(text.contains("codec_name=aac"), "\(text)")
            #expect(text.contains("duration=5.3"), "\(text)")
            let keyframes = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-clip-keys-\(UUID().uuidString).txt").path
            defer { try? FileManager.default.removeItem(atPath: keyframes) }
            let keys = try ChildProcess.spawn(ffprobe, [
                "-v", "error", "-select_streams", "v", "-skip_frame", "nokey", "-show_entries", "frame=pts_time", "-of", "csv=p=0", path,
            ], environment: ProcessInfo.processInfo.environment, output: keyframes)
            #expect(keys.wait() == 0)
            let times = try String(contentsOfFile: keyframes, encoding: .utf8).split(whereSeparator: \.isNewline).filter { !$0.isEmpty }
            #expect(times.count == 1, "keyframes at \(times)")
        }
    }
}
