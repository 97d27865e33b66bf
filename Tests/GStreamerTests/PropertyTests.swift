import GStreamer
import Testing

@Suite("Element properties")
struct PropertyTests {
    let pipeline: Pipeline
    let encoder: Element
    let source: Element

    init() throws {
        pipeline = try Pipeline(description: "videotestsrc name=src ! x264enc name=enc ! fakesink name=sink")
        encoder = try pipeline.element(named: "enc")
        source = try pipeline.element(named: "src")
    }

    @Test("typed get and set for every kind of value")
    func roundTrips() throws {
        try encoder.set("bitrate", 1500)                      // guint
        #expect(try encoder.property("bitrate", as: Int.self) == 1500)
        try source.set("num-buffers", 42)                     // gint
        #expect(try source.property("num-buffers", as: Int32.self) == 42)
        try source.set("timestamp-offset", Int64(5))          // gint64
        #expect(try source.property("timestamp-offset", as: Int64.self) == 5)
        #expect(throws: GStreamerError.self) { try source.set("timestamp-offset", -5) }  // below its range
        let sink = try pipeline.element(named: "sink")
        try sink.set("max-lateness", Int64(20_000_000))       // gint64
        try sink.set("ts-offset", Int64(3))
        #expect(try sink.property("ts-offset", as: Int64.self) == 3)
        try sink.set("processing-deadline", UInt64(7))        // guint64
        #expect(try sink.property("processing-deadline", as: UInt64.self) == 7)
        try encoder.set("ip-factor", 1.5)                     // gfloat
        #expect(try encoder.property("ip-factor", as: Double.self) == 1.5)
        try source.set("is-live", true)                       // gboolean
        #expect(try source.property("is-live", as: Bool.self))
        try encoder.set("option-string", "ref=1")            // string
        #expect(try encoder.property("option-string", as: String.self) == "ref=1")
        try encoder.set("speed-preset", "ultrafast")          // enum by nick
        #expect(try encoder.property("speed-preset") == .enumeration(nick: "ultrafast", value: 1))
        try encoder.set("tune", "zerolatency")                // flags by nick
        guard case .flags(let nicks, _) = try encoder.property("tune") else {
            Issue.record("tune should read back as flags")
            return
        }
        #expect(nicks == ["zerolatency"])
        let caps = try Caps("video/x-raw,width=320,height=240")
        let filter = try Pipeline(description: "videotestsrc ! capsfilter name=f ! fakesink").element(named: "f")
        try filter.set("caps", caps)                          // GstCaps
        #expect(try filter.property("caps", as: Caps.self) == caps)
        try filter.set("caps", "video/x-raw,width=64")        // caps from text
        #expect(try filter.property("caps", as: Caps.self).description == "video/x-raw, width=(int)64")
    }

    @Test("an unknown property is a typed error")
    func unknownProperty() {
        #expect(throws: GStreamerError.unknownProperty(element: "enc", property: "no-such-thing")) {
            try encoder.set("no-such-thing", 1)
        }
        #expect(throws: GStreamerError.unknownProperty(element: "enc", property: "no-such-thing")) {
            try encoder.property("no-such-thing")
        }
    }

    @Test("bad values are refused, not clamped or coerced")
    func badValues() throws {
        let original = try encoder.property("bitrate", as: Int.self)
        // Wrong type.
        #expect(throws: GStreamerError.self) { try encoder.set("bitrate", "fast") }
        // Out of the property's range (x264enc bitrate is 1…2048000).
        #expect(throws: GStreamerError.self) { try encoder.set("bitrate", 0) }
        // Out of the C type's range.
        #expect(throws: GStreamerError.self) { try encoder.set("bitrate", -1) }
        #expect(throws: GStreamerError.self) { try source.set("num-buffers", Int64(1) << 40) }
        // Unknown enum nick, with the valid ones in the message.
        do {
            try encoder.set("speed-preset", "warp-speed")
            Issue.record("an unknown nick should fail")
        } catch {
            guard case .badPropertyValue(_, let property, let expected, let given) = error else {
                Issue.record("unexpected error \(error)")
                return
            }
            #expect(property == "speed-preset")
            #expect(expected.contains("ultrafast"))
            #expect(given == "warp-speed")
        }
        #expect(throws: GStreamerError.self) { try source.set("is-live", 3.5) }
        #expect(try encoder.property("bitrate", as: Int.self) == original)
    }

    @Test("read-only properties refuse writes")
    func readOnly() {
        let sink = try? pipeline.element(named: "sink")
        #expect(throws: GStreamerError.propertyNotAccessible(element: "sink", property: "last-sample", reason: "read-only")) {
            try sink?.set("last-sample", "x")
        }
    }
}
