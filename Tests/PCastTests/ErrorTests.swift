import GStreamer
import PCast
import Testing

/// The SDK's errors are structs with a code: a new code breaks no application's `switch`, the
/// error underneath is kept as a value, and each says what went wrong in words.
@Suite("Public errors: codes, statuses, descriptions, the error underneath")
struct ErrorTests {
    /// How an application handles a PCast error: by code, with a default for codes added later.
    static func advice(_ error: PCastError) -> String {
        switch error.code {
        case .refused where error.status == .unauthorized: return "sign in again"
        case .timeout, .offline, .disconnected: return "retry"
        default: return "report: \(error)"
        }
    }

    @Test("PCastError: the constructors give the code, the seed's status and a description naming the specifics")
    func pcastErrors() {
        let refused = PCastError.refused(.unauthorized, "token expired")
        #expect(refused.code == .refused && refused.status == .unauthorized && refused.detail == "token expired")
        #expect(refused.description == "refused (unauthorized): token expired")
        #expect(PCastError.timeout.status == .timeout && PCastError.invalidURI("x").status == .badRequest)
        #expect(PCastError.invalidURI("http://nope").description.contains("http://nope"))
        #expect(Self.advice(refused) == "sign in again" && Self.advice(.offline) == "retry")
        #expect(Self.advice(.refused(.capacity, "full")) == "report: refused (capacity): full")
        // Equal by code, status and detail: tests and applications compare against the constructors.
        #expect(PCastError.notStarted == .notStarted && PCastError.refused(.notFound, "a") != .refused(.notFound, "b"))
        // A code an older application never heard of still has a description.
        let custom = PCastError(code: .media, detail: "something new")
        #expect(custom.description == "something new" && custom.mediaError == nil)
        // Every code's description is words, not an empty string.
        for error in [PCastError.invalidURI("u"), .connectionFailed("c"), .disconnected, .timeout, .refused(.failed, "r"),
                      .notStarted, .offline, .invalidTransport("t"), .invalidRequest("q"), .media(.notificationExpired)] {
            #expect(error.description.count > 8, "\(error.code): '\(error.description)'")
        }
    }

    @Test("the error underneath is kept as a value: a media error inside a PCast error, a GStreamer error inside a media error")
    func underlying() throws {
        let gstreamer = GStreamerError.elementNotFound("x264enc")
        let media = MediaError.gstreamer(gstreamer)
        #expect(media.code == .gstreamer && media.underlying as? GStreamerError == gstreamer)
        #expect(media.description == gstreamer.description)
        let wrapped = PCastError.media(media)
        #expect(wrapped.code == .media && wrapped.mediaError == media)
        #expect(wrapped.description == media.description)
        #expect(try #require(wrapped.mediaError?.underlying as? GStreamerError) == gstreamer)
    }

    @Test("MediaError and UserMediaError: codes, what they concern, the seed's status")
    func mediaErrors() {
        let kind = MediaError.wrongMediaKind(expected: .video, given: .audio)
        #expect(kind.code == .wrongMediaKind && kind.description == "an audio frame was written to a video stream")
        #expect(MediaError.formatNotAccepted("video/x-raw,width=1").description == "downstream does not accept video/x-raw,width=1")
        let constraint = UserMediaError.constraintNotSatisfied(.height, "no mode offers 900")
        #expect(constraint.code == .constraintNotSatisfied && constraint.capability == .height && constraint.detail == "no mode offers 900")
        #expect(UserMediaError.deviceBusy("/dev/video0").status == .conflict)
        #expect(UserMediaError.deviceNotFound("/dev/video7").status == .notFound)
        #expect(UserMediaError.noSource(.audio).kind == .audio && UserMediaError.noSource(.audio).description == "no audio source")
    }
}
