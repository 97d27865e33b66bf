import PCastMedia

extension UserMediaOptions {
    /// The synthetic test sources the benchmarks and the soak publish: video at `width`×`height`
    /// and `fps`, and the synthetic audio tone unless `audio` is false.
    ///
    /// ```swift
    /// let media = try await pcast.getUserMedia(.synthetic(audio: false))
    /// ```
    public static func synthetic(width: Int = 640, height: Int = 360, fps: Double = 30, audio: Bool = true) -> UserMediaOptions {
        var options = UserMediaOptions()
        options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
        options.video.width = .exact(width)
        options.video.height = .exact(height)
        options.video.frameRate = .exact(fps)
        if audio {
            options.audio.deviceId = .exact(SourceDevices.syntheticAudioId)
        } else {
            options.audio.enabled = false
        }
        return options
    }
}
