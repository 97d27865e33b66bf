import PCastMedia
import Testing

@Suite("Data quality of a viewer")
struct DataQualityTests {
    func sample(video: Int = 30, audio: Int = 50, expected: Int = 300, missing: Int = 0, hasVideo: Bool = true) -> DataQualitySample {
        DataQualitySample(hasVideo: hasVideo, videoFramesDecoded: video, audioBuffersDecoded: audio, packetsExpected: expected, packetsMissingOnArrival: missing)
    }

    @Test("status from what is decoded; downloadLimited from this leg's loss")
    func assess() {
        #expect(DataQualityEvaluator.assess(sample()) == (.all, .none))
        #expect(DataQualityEvaluator.assess(sample(missing: 30)) == (.all, .downloadLimited))
        #expect(DataQualityEvaluator.assess(sample(missing: 14)) == (.all, .none))
        #expect(DataQualityEvaluator.assess(sample(video: 0, missing: 60)) == (.audioOnly, .downloadLimited))
        #expect(DataQualityEvaluator.assess(sample(video: 0, audio: 0, expected: 0)) == (.noData, .none))
        #expect(DataQualityEvaluator.assess(sample(video: 0, hasVideo: false)) == (.audioOnly, .none))
        #expect(DataQualityEvaluator.assess(sample(video: 5, hasVideo: false)) == (.audioOnly, .none))
    }

    @Test("the publisher's reason reaches viewers: upload → publisherLimited, viewers' requests → networkLimited; this viewer's own loss comes first")
    func publisherReasons() {
        #expect(DataQualityEvaluator.assess(sample(), publisher: .uploadLimited) == (.all, .publisherLimited))
        #expect(DataQualityEvaluator.assess(sample(video: 0), publisher: .networkLimited) == (.audioOnly, .networkLimited))
        #expect(DataQualityEvaluator.assess(sample(missing: 30), publisher: .uploadLimited) == (.all, .downloadLimited))
        #expect(DataQualityEvaluator.assessPublisher(videoPackets: 10, audioPackets: 5, uploadLimited: false, networkLimited: true) == (.all, .networkLimited))
        #expect(DataQualityEvaluator.assessPublisher(videoPackets: 10, audioPackets: 5, uploadLimited: true, networkLimited: true) == (.all, .uploadLimited))
    }

    @Test("while the relay holds the video back (audio-only fallback): audioOnly/downloadLimited, even with frames still draining and a publisher reason")
    func videoSuspended() {
        #expect(DataQualityEvaluator.assess(sample(), publisher: .uploadLimited, videoSuspended: true) == (.audioOnly, .downloadLimited))
        #expect(DataQualityEvaluator.assess(sample(video: 0, audio: 0, expected: 0), videoSuspended: true) == (.noData, .downloadLimited))
        #expect(DataQualityEvaluator.assess(sample(video: 0), videoSuspended: false) == (.audioOnly, .none))
    }

    @Test("a simulcast viewer its link holds below the best layer: all/downloadLimited, before the publisher's reason")
    func layerReduced() {
        #expect(DataQualityEvaluator.assess(sample(), layerReduced: true) == (.all, .downloadLimited))
        #expect(DataQualityEvaluator.assess(sample(), publisher: .uploadLimited, layerReduced: true) == (.all, .downloadLimited))
        #expect(DataQualityEvaluator.assess(sample(), layerReduced: false) == (.all, .none))
    }

    @Test("the first second is reported at once; a change needs two seconds in a row; one bad second does not flap")
    func hysteresis() {
        var evaluator = DataQualityEvaluator()
        #expect(evaluator.evaluate(sample())! == (.all, .none))
        #expect(evaluator.evaluate(sample()) == nil)
        #expect(evaluator.evaluate(sample(video: 0)) == nil)          // one frozen second
        #expect(evaluator.evaluate(sample()) == nil)                  // back: nothing to report
        #expect(evaluator.evaluate(sample(missing: 40)) == nil)
        #expect(evaluator.evaluate(sample(missing: 40))! == (.all, .downloadLimited))
        #expect(evaluator.evaluate(sample(video: 0, audio: 0, expected: 0)) == nil)
        #expect(evaluator.evaluate(sample(video: 0, audio: 0, expected: 0))! == (.noData, .none))
        #expect(evaluator.evaluate(sample()) == nil)
        #expect(evaluator.evaluate(sample())! == (.all, .none))
        #expect(evaluator.reported! == (.all, .none))
    }

    @Test("a publisher: all while video leaves, audioOnly, noData; uploadLimited from the estimate")
    func publisher() {
        #expect(DataQualityEvaluator.assessPublisher(videoPackets: 90, audioPackets: 100, uploadLimited: false) == (.all, .none))
        #expect(DataQualityEvaluator.assessPublisher(videoPackets: 40, audioPackets: 100, uploadLimited: true) == (.all, .uploadLimited))
        #expect(DataQualityEvaluator.assessPublisher(videoPackets: 0, audioPackets: 100, uploadLimited: true) == (.audioOnly, .uploadLimited))
        #expect(DataQualityEvaluator.assessPublisher(videoPackets: 0, audioPackets: 0, uploadLimited: false) == (.noData, .none))
    }
}
