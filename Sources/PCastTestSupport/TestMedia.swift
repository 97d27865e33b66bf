import Foundation
import Synchronization

/// Media the tests make themselves, so a clone of the repository alone runs every test.
///
/// ```swift
/// let path = try await TestMedia.clip720p()   // made once per machine, then reused
/// ```
public enum TestMedia {
    /// Where the clips are kept between test processes.
    public static let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcastkit-test-media-v1").path
    public static let clip720pName = "clip-720p.mp4"
    private static let making = Mutex(())

    /// A 5.3 s MP4 in the shape of a typical published file: H.264 Main 1280×720 at 25 fps with
    /// one keyframe (at the start, as a short clip from a camera app has), and 48 kHz stereo AAC
    /// (a moving test pattern and a 440 Hz tone). Made with ffmpeg on first use; written under a
    /// temporary name and renamed, so test processes running at once never see half a file.
    /// ffmpeg is waited for on a thread of its own, not on the cooperative pool.
    public static func clip720p() async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try makeClip720p() }) }.start()
        }
    }

    private static func makeClip720p() throws -> String {
        let path = (directory as NSString).appendingPathComponent(clip720pName)
        return try making.withLock { _ in
            if FileManager.default.fileExists(atPath: path) { return path }
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let partial = path + ".\(getpid()).partial"
            let ffmpeg = try executable("ffmpeg")
            let process = try ChildProcess.spawn(ffmpeg, [
                "-hide_banner", "-loglevel", "error", "-y",
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25",
                "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
                "-t", "5.3", "-c:v", "libx264", "-preset", "veryfast", "-profile:v", "main", "-pix_fmt", "yuv420p",
                "-g", "1000", "-x264-params", "scenecut=0", "-c:a", "aac", "-ac", "2", "-b:a", "128k",
                "-f", "mp4", partial,
            ], environment: ProcessInfo.processInfo.environment)
            let status = process.wait()
            guard status == 0, FileManager.default.fileExists(atPath: partial) else {
                try? FileManager.default.removeItem(atPath: partial)
                throw StandInFailure(description: "ffmpeg could not make the test clip (exit status \(status))")
            }
            guard rename(partial, path) == 0 else { throw StandInFailure(description: "cannot move the test clip into \(directory): errno \(errno)") }
            return path
        }
    }
}
