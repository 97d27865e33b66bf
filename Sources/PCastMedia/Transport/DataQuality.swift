/// What reaches a viewer (the PCast iOS SDK's data quality status).
public enum DataQualityStatus: String, Sendable, Hashable {
    case noData
    case audioOnly
    case all
}

/// Why quality is reduced (the PCast iOS SDK's data quality reason).
public enum DataQualityReason: String, Sendable, Hashable {
    case none
    case uploadLimited
    case downloadLimited
    case publisherLimited
    case networkLimited
}

/// One second (or any interval) of what a viewer received.
public struct DataQualitySample: Sendable, Hashable {
    /// Whether the stream has a video track.
    public var hasVideo: Bool
    public var videoFramesDecoded: Int
    public var audioBuffersDecoded: Int
    /// Sequence numbers expected in the interval, and those missing when packets arrived.
    public var packetsExpected: Int
    public var packetsMissingOnArrival: Int

    public init(hasVideo: Bool, videoFramesDecoded: Int, audioBuffersDecoded: Int, packetsExpected: Int, packetsMissingOnArrival: Int) {
        self.hasVideo = hasVideo
        self.videoFramesDecoded = videoFramesDecoded
        self.audioBuffersDecoded = audioBuffersDecoded
        self.packetsExpected = packetsExpected
        self.packetsMissingOnArrival = packetsMissingOnArrival
    }
}

/// A viewer's data quality from what it receives: `all` while video frames are decoded, `audioOnly`
/// when only audio is (or the stream has no video), `noData` when nothing is; the reason is
/// `downloadLimited` when this viewer's own leg loses ``lossThreshold`` or more of the packets;
/// otherwise what the publisher reports through the platform: `publisherLimited` while its upload
/// holds the stream down, `networkLimited` while viewers' bandwidth requests do; else `none`.
/// While the relay holds the video back from this viewer (its leg cannot carry it: the audio-only
/// fallback), it is `audioOnly` (or `noData`) and `downloadLimited` whatever else it measures.
/// The first sample is reported at once; after that a change is reported when two samples in a
/// row agree, so one bad second does not flap the status.
///
/// ```swift
/// var evaluator = DataQualityEvaluator()
/// if let (status, reason) = evaluator.evaluate(sample) { callback(status, reason) }
/// ```
public struct DataQualityEvaluator: Sendable {
    public static let lossThreshold = 0.05
    public private(set) var reported: (status: DataQualityStatus, reason: DataQualityReason)?
    private var pending: (status: DataQualityStatus, reason: DataQualityReason)?

    public init() {}

    /// `publisher`: the publisher's own reason (`uploadLimited`, `networkLimited` or `none`).
    /// `videoSuspended`: the relay holds this viewer's video back. `layerReduced`: the relay sends
    /// this simulcast viewer a smaller layer because its link cannot carry more.
    public static func assess(_ sample: DataQualitySample, publisher: DataQualityReason = .none, videoSuspended: Bool = false,
                              layerReduced: Bool = false)
        -> (status: DataQualityStatus, reason: DataQualityReason) {
        let status: DataQualityStatus
        if videoSuspended {
            // Frames still in the pipeline when it stopped do not make it `all`.
            return (sample.audioBuffersDecoded > 0 ? .audioOnly : .noData, .downloadLimited)
        } else if sample.hasVideo && sample.videoFramesDecoded > 0 {
            status = .all
        } else if sample.audioBuffersDecoded > 0 {
            status = .audioOnly
        } else {
            status = .noData
        }
        let loss = sample.packetsExpected > 0 ? Double(sample.packetsMissingOnArrival) / Double(sample.packetsExpected) : 0
        if loss >= lossThreshold || layerReduced { return (status, .downloadLimited) }
        switch publisher {
        case .uploadLimited, .publisherLimited: return (status, .publisherLimited)
        case .networkLimited: return (status, .networkLimited)
        case .none, .downloadLimited: return (status, .none)
        }
    }

    /// The new status and reason when they change; nil otherwise.
    public mutating func evaluate(_ sample: DataQualitySample, publisher: DataQualityReason = .none, videoSuspended: Bool = false,
                                  layerReduced: Bool = false)
        -> (status: DataQualityStatus, reason: DataQualityReason)? {
        evaluate(assessed: Self.assess(sample, publisher: publisher, videoSuspended: videoSuspended, layerReduced: layerReduced))
    }

    /// A publisher's data quality over an interval: `all` while video packets leave, `audioOnly`
    /// when only audio does, `noData` when nothing does; `uploadLimited` while the bitrate estimate
    /// holds the video below its configured bitrate, else `networkLimited` while its viewers'
    /// bandwidth requests do.
    public static func assessPublisher(videoPackets: Int, audioPackets: Int, uploadLimited: Bool, networkLimited: Bool = false)
        -> (status: DataQualityStatus, reason: DataQualityReason) {
        let status: DataQualityStatus = videoPackets > 0 ? .all : (audioPackets > 0 ? .audioOnly : .noData)
        return (status, uploadLimited ? .uploadLimited : (networkLimited ? .networkLimited : .none))
    }

    /// Applies the reporting rule (first at once, then two in a row) to an assessment.
    public mutating func evaluate(assessed: (status: DataQualityStatus, reason: DataQualityReason))
        -> (status: DataQualityStatus, reason: DataQualityReason)? {
        guard let current = reported else {
            reported = assessed
            return assessed
        }
        guard assessed != current else {
            pending = nil
            return nil
        }
        if let pending, pending == assessed {
            reported = assessed
            self.pending = nil
            return assessed
        }
        pending = assessed
        return nil
    }
}
