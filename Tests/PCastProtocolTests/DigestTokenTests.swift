import PCastTestSupport
import Crypto
import Foundation
@testable import PCastProtocol
import Testing

typealias Op = PythonOracle.Op

// MARK: - Helpers

private func apply(_ op: Op, to b: DigestTokenBuilder) -> DigestTokenBuilder {
    func date(_ micros: Int64) -> Date { Date(timeIntervalSince1970: Double(micros) / 1e6) }
    switch op {
    case .uri(let v): return b.uri(v)
    case .capability(let v): return b.capability(v)
    case .expiresAtMilliseconds(let v): return b.expiresAt(milliseconds: v)
    case .expiresAtDate(let us): return b.expiresAt(date(us))
    case .expiresIn(let s, let us): return b.expiresIn(seconds: s, now: date(us))
    case .auth: return b.forAuthenticateOnly()
    case .stream: return b.forStreamingOnly()
    case .publish: return b.forPublishingOnly()
    case .session(let v): return b.sessionId(v)
    case .remoteAddress(let v): return b.remoteAddress(v)
    case .originStream(let v): return b.originStreamId(v)
    case .channel(let v): return b.channel(v)
    case .channelAlias(let v): return b.channelAlias(v)
    case .room(let v): return b.room(v)
    case .roomAlias(let v): return b.roomAlias(v)
    case .tag(let v): return b.tag(v)
    case .applyTag(let v): return b.applyTag(v)
    }
}

private func builder(_ ops: [Op]) -> DigestTokenBuilder {
    ops.reduce(DigestTokenBuilder()) { apply($1, to: $0) }
}

/// What Python's `verify_and_decode` returns as `value`: the claims with `applicationId` set.
private func pythonValueJSON(_ claims: TokenClaims) -> String {
    var fields = claims.fields
    if let i = fields.firstIndex(where: { $0.name == "applicationId" }) {
        fields[i].value = .string(claims.applicationId)
    } else {
        fields.append(TokenField(name: "applicationId", value: .string(claims.applicationId)))
    }
    var out = ""
    TokenValue.object(fields).appendJSON(to: &out)
    return out
}

/// Python answers `server-error` where this module answers `badToken`.
private func mapped(_ pythonCode: String) -> String {
    pythonCode == "server-error" ? "bad-token" : pythonCode
}

private func digestFor(appId: [UInt8], secret: String, token: [UInt8]) -> String {
    let mac = HMAC<SHA512>.authenticationCode(for: token, using: SymmetricKey(data: appId + Array(secret.utf8)))
    return Data(mac).base64EncodedString()
}

private func wrap(_ envelopeBytes: [UInt8]) -> String {
    "DIGEST:" + Data(envelopeBytes).base64EncodedString()
}

private func jsonString(_ s: String) -> String {
    var out = ""
    PythonCompat.appendJSONString(s, to: &out)
    return out
}

/// A correctly signed token over an arbitrary claims string.
private func signed(appId: String = "app", secret: String = "sekrit", claims: String) -> String {
    let d = digestFor(appId: Array(appId.utf8), secret: secret, token: Array(claims.utf8))
    return wrap(Array("{\"applicationId\":\(jsonString(appId)),\"digest\":\"\(d)\",\"token\":\(jsonString(claims))}".utf8))
}

/// Strings that exercise Python's escaping: quotes, backslashes, slashes, control characters,
/// DEL, Latin-1, BMP, U+2028, astral (surrogate pairs), combining marks and canonical twins.
private let tricky: [String] = [
    "", "plain", "with \"quotes\"", "back\\slash", "sl/ash//", "https://pcast.example/v1/chan?x=1&y=2",
    "tab\there", "nl\nand\rcr", "\u{01}\u{1F}\u{7F}", "é", "e\u{301}", "日本語", "🎥📡", "\u{2028}\u{2029}",
    "\u{FFFF}\u{FFFE}", "<script>", "'single'", "null", "{\"json\":1}", "\u{10FFFF}",
]

private func randomString(_ rng: inout SeededRNG) -> String {
    let pool: [Unicode.Scalar] = [
        "a", "Z", "0", "-", "#", ":", "/", "\\", "\"", "'", " ", "\t", "\n", "\u{00}", "\u{1B}", "\u{7F}",
        "\u{80}", "é", "ß", "\u{301}", "\u{2028}", "中", "\u{FEFF}", "\u{FFFD}", "😀", "\u{1F3A5}", "\u{E000}",
    ]
    var s = String.UnicodeScalarView()
    for _ in 0..<Int.random(in: 0...12, using: &rng) { s.append(pool.randomElement(using: &rng)!) }
    return String(s)
}

private func randomOps(_ rng: inout SeededRNG, maxApplyTags: Int) -> [Op] {
    var ops: [Op] = []
    var applyTags = Set<[UInt8]>()
    for _ in 0..<Int.random(in: 0...10, using: &rng) {
        let s = randomString(&rng)
        switch Int.random(in: 0..<18, using: &rng) {
        case 0: ops.append(.uri(s))
        case 1, 2: ops.append(.capability(s))
        case 3: ops.append(.expiresAtMilliseconds(Int64.random(in: -1_000_000...4_102_444_800_000, using: &rng)))
        case 4: ops.append(.expiresIn(seconds: Int.random(in: -86_400...86_400 * 365, using: &rng),
                                      nowMicros: Int64.random(in: 500_000_000_000_000...1_900_000_000_000_000, using: &rng)))
        case 5: ops.append(.expiresAtDate(micros: Int64.random(in: 500_000_000_000_000...1_900_000_000_000_000, using: &rng)))
        case 6: ops.append(.auth)
        case 7: ops.append(.stream)
        case 8: ops.append(.publish)
        case 9: ops.append(.session(s))
        case 10: ops.append(.remoteAddress(s))
        case 11: ops.append(.originStream(s))
        case 12: ops.append(.channel(s))
        case 13: ops.append(.channelAlias(s))
        case 14: ops.append(.room(s))
        case 15: ops.append(.roomAlias(s))
        case 16: ops.append(.tag(s))
        default:
            let key = Array(s.utf8)
            if applyTags.contains(key) || applyTags.count < maxApplyTags {
                applyTags.insert(key)
                ops.append(.applyTag(s))
            }
        }
    }
    // Python refuses tokens without expiry; make sure there is one somewhere.
    if !ops.contains(where: {
        switch $0 {
        case .expiresAtMilliseconds, .expiresAtDate, .expiresIn: return true
        default: return false
        }
    }) {
        ops.insert(.expiresAtMilliseconds(1_700_000_000_000), at: Int.random(in: 0...ops.count, using: &rng))
    }
    return ops
}

/// Hand-picked builder sequences: field orders, re-setting fields, every setter, tricky text.
private let fixedCases: [PythonOracle.BuildCase] = {
    var cases: [PythonOracle.BuildCase] = [
        .init(appId: "my-app", secret: "my-secret", ops: [.expiresAtMilliseconds(1_700_000_000_000)]),
        .init(appId: "my-app", secret: "my-secret", ops: [
            .expiresAtMilliseconds(1_700_000_000_000), .uri("https://pcast.example"), .auth,
            .capability("streaming"), .session("sess-1"), .remoteAddress("10.0.0.1"),
            .originStream("origin#1"), .channel("us-east#app#ch"), .applyTag("customer:1"),
        ]),
        .init(appId: "my-app", secret: "my-secret", ops: [
            .applyTag("customer:1"), .channelAlias("alias"), .originStream("o"), .remoteAddress("::1"),
            .session("s"), .capability("publishing"), .publish, .uri("u"), .expiresAtMilliseconds(1),
        ]),
        // Re-setting keeps the first position and takes the last value.
        .init(appId: "a", secret: "s", ops: [
            .uri("first"), .expiresAtMilliseconds(5), .auth, .channel("c1"), .uri("second"), .stream,
            .roomAlias("r"), .expiresAtMilliseconds(6), .publish, .tag("t"),
        ]),
        // Capabilities: sorted set by code point; canonical twins stay distinct.
        .init(appId: "a", secret: "s", ops: [
            .capability("streaming"), .capability("publishing"), .capability("multi-bitrate"),
            .capability("streaming"), .capability("Z"), .capability("a"), .capability("é"),
            .capability("e\u{301}"), .capability("😀"), .capability(""), .expiresAtMilliseconds(7),
        ]),
        .init(appId: "a", secret: "s", ops: [.applyTag("x"), .applyTag("x"), .expiresAtMilliseconds(8)]),
        .init(appId: "a", secret: "s", ops: [.room("room-1"), .expiresAtMilliseconds(Int64.max)]),
        .init(appId: "a", secret: "s", ops: [.expiresAtMilliseconds(-1), .roomAlias("")]),
        // Deterministic clocks: the same float arithmetic as Python.
        .init(appId: "a", secret: "s", ops: [.expiresIn(seconds: 3600, nowMicros: 1_700_000_000_123_456)]),
        .init(appId: "a", secret: "s", ops: [.expiresIn(seconds: 0, nowMicros: 1_700_000_000_000_001)]),
        .init(appId: "a", secret: "s", ops: [.expiresIn(seconds: -60, nowMicros: 1_234_567_890_999_999)]),
        .init(appId: "a", secret: "s", ops: [.expiresAtDate(micros: 1_700_000_000_123_456)]),
        .init(appId: "a", secret: "s", ops: [.expiresAtDate(micros: 1_800_000_000_000_999)]),
        // Non-ASCII credentials are escaped in the envelope but hashed as UTF-8.
        .init(appId: "app-é-🎥", secret: "s€cret/\"\\", ops: [.expiresAtMilliseconds(9), .uri("/")]),
    ]
    for (i, s) in tricky.enumerated() {
        cases.append(.init(appId: "app\(i)", secret: "secret", ops: [
            .uri(s), .expiresAtMilliseconds(1_700_000_000_000 + Int64(i)), .capability(s), .tag(s),
            .session(s), .remoteAddress(s), .originStream(s), .applyTag(s),
        ]))
    }
    return cases
}()

private func randomCases(seed: UInt64, count: Int, maxApplyTags: Int) -> [PythonOracle.BuildCase] {
    var rng = SeededRNG(seed: seed)
    return (0..<count).map { _ in
        .init(appId: "app-" + randomString(&rng) + "x", secret: "s" + randomString(&rng),
              ops: randomOps(&rng, maxApplyTags: maxApplyTags))
    }
}

// MARK: - Tests against the Python oracle

@Suite("EdgeAuth digest tokens")
struct DigestTokenTests {
    @Test("Python-built tokens verify in Swift, and Swift builds byte-identical tokens")
    func pythonTokensMatchSwift() throws {
        let cases = fixedCases + randomCases(seed: 0xED6E_A017, count: 200, maxApplyTags: 1)
        let results = try PythonOracle.build(cases)
        for (c, py) in zip(cases, results) {
            let b = builder(c.ops)
            #expect(b.json == py.json, "claims JSON differs for \(c.ops)")
            let swiftToken = try b.encode(applicationId: c.appId, secret: c.secret)
            #expect(swiftToken == py.token, "token differs for \(c.ops)")

            guard case .verified(let claims) = DigestToken.verify(py.token, applicationId: c.appId, secret: c.secret) else {
                Issue.record("Python token not verified by Swift: \(c.ops)")
                continue
            }
            #expect(claims.json == py.json)
            #expect(claims.applicationId == c.appId)
            #expect(claims.fields == b.fields)
            #expect(DigestToken.verify(py.token, secret: c.secret) == .verified(claims))
        }
    }

    @Test("Swift-built tokens verify in Python with identical decoded claims")
    func swiftTokensVerifyInPython() throws {
        var cases = fixedCases + randomCases(seed: 0x5EED_0002, count: 150, maxApplyTags: 4)
        // Things only the Swift API expresses directly.
        cases.append(.init(appId: "a", secret: "s", ops: [.expiresAtMilliseconds(1), .applyTag("t1"), .applyTag("t2"), .applyTag("t3")]))
        var tokens: [String] = []
        var claimsList: [TokenClaims] = []
        for c in cases {
            let token = try builder(c.ops).encode(applicationId: c.appId, secret: c.secret)
            guard case .verified(let claims) = DigestToken.verify(token, applicationId: c.appId, secret: c.secret) else {
                Issue.record("Swift cannot verify its own token: \(c.ops)")
                return
            }
            tokens.append(token)
            claimsList.append(claims)
        }
        let extra = try DigestTokenBuilder().expiresAt(milliseconds: 42).type(.other("custom"))
            .requiredTag(.raw("anything:goes")).encode(applicationId: "x", secret: "y")
        tokens.append(extra)
        guard case .verified(let extraClaims) = DigestToken.verify(extra, secret: "y") else {
            Issue.record("extra token not verified")
            return
        }
        claimsList.append(extraClaims)
        let secrets = cases.map(\.secret) + ["y"]

        let results = try PythonOracle.verify(zip(tokens, secrets).map { .init(token: $0, secret: $1) })
        for (i, r) in results.enumerated() {
            #expect(r.code == "verified", "Python rejected Swift token #\(i): \(r.code)")
            #expect(r.value == pythonValueJSON(claimsList[i]), "decoded claims differ for #\(i)")
        }
        // And with a wrong secret Python says bad-digest too.
        let wrong = try PythonOracle.verify([.init(token: tokens[0], secret: "not-the-secret")])
        #expect(wrong[0].code == "bad-digest")
    }

    @Test("several apply-tags: Python emits set order, Swift verifies and sees the same set")
    func multipleApplyTags() throws {
        let c = PythonOracle.BuildCase(appId: "a", secret: "s", ops: [
            .expiresAtMilliseconds(1), .applyTag("b"), .applyTag("a"), .applyTag("c"), .applyTag("b"),
        ])
        let py = try PythonOracle.build([c])[0]
        guard case .verified(let claims) = DigestToken.verify(py.token, applicationId: "a", secret: "s") else {
            Issue.record("not verified")
            return
        }
        #expect(Set(claims.applyTags) == ["a", "b", "c"])
        #expect(claims.applyTags.count == 3)
        #expect(builder(c.ops).fields.first { $0.name == "applyTags" }?.value.stringArrayValue == ["b", "a", "c"])
    }

    @Test("malformed and unusual envelopes give the same result code as Python")
    func malformedEnvelopesMatchPython() throws {
        let claims = #"{"expires":4102444800000,"uri":"https://a/b"}"#
        let valid = signed(claims: claims)
        let d = digestFor(appId: Array("app".utf8), secret: "sekrit", token: Array(claims.utf8))
        let envelope = "{\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims))}"
        let envBytes = Array(envelope.utf8)
        let b64 = String(valid.dropFirst(7))

        func utf16(_ s: String, bigEndian: Bool, bom: Bool) -> [UInt8] {
            var out: [UInt8] = bom ? (bigEndian ? [0xFE, 0xFF] : [0xFF, 0xFE]) : []
            for u in s.utf16 {
                let hi = UInt8(u >> 8), lo = UInt8(u & 0xFF)
                out += bigEndian ? [hi, lo] : [lo, hi]
            }
            return out
        }
        func utf32(_ s: String, bigEndian: Bool, bom: Bool) -> [UInt8] {
            var out: [UInt8] = bom ? (bigEndian ? [0, 0, 0xFE, 0xFF] : [0xFF, 0xFE, 0, 0]) : []
            for u in s.unicodeScalars {
                let v = u.value
                let be: [UInt8] = [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
                out += bigEndian ? be : be.reversed()
            }
            return out
        }
        func env(_ fields: String) -> String { wrap(Array("{\(fields)}".utf8)) }
        let deep = { (n: Int) in "{\"expires\":1,\"x\":" + String(repeating: "[", count: n) + String(repeating: "]", count: n) + "}" }

        // (name, token, secret, compare decoded value)
        let cases: [(String, String, String, Bool)] = [
            ("empty", "", "sekrit", true),
            ("no prefix", "abc", "sekrit", true),
            ("lowercase prefix", "digest:" + b64, "sekrit", true),
            ("leading space", " " + valid, "sekrit", true),
            ("prefix only", "DIGEST:", "sekrit", true),
            ("junk base64", "DIGEST:!!!!", "sekrit", true),
            ("non-ASCII base64", "DIGEST:é" + b64, "sekrit", true),
            ("valid", valid, "sekrit", true),
            ("wrong secret", valid, "other", true),
            ("base64 with newlines", "DIGEST:" + b64.enumerated().map { $0.offset % 10 == 9 ? "\($0.element)\n" : "\($0.element)" }.joined(), "sekrit", true),
            ("base64 with spaces and junk", "DIGEST: " + b64.map { "\($0)*" }.joined(), "sekrit", true),
            ("base64 without padding", "DIGEST:" + b64.filter { $0 != "=" }, "sekrit", true),
            ("base64 truncated by one", String(valid.dropLast()), "sekrit", true),
            ("data after padding", valid + "====QUJD", "sekrit", true),
            ("leading padding", "DIGEST:=" + b64, "sekrit", true),
            ("JSON array", wrap(Array("[1,2]".utf8)), "sekrit", true),
            ("JSON string", wrap(Array("\"str\"".utf8)), "sekrit", true),
            ("JSON null", wrap(Array("null".utf8)), "sekrit", true),
            ("empty object", env(""), "sekrit", true),
            ("not JSON", wrap(Array("hello".utf8)), "sekrit", true),
            ("trailing garbage", wrap(envBytes + Array("x".utf8)), "sekrit", true),
            ("numeric applicationId", env("\"applicationId\":1,\"digest\":\"\(d)\",\"token\":\(jsonString(claims))"), "sekrit", true),
            ("empty digest", env("\"applicationId\":\"app\",\"digest\":\"\",\"token\":\(jsonString(claims))"), "sekrit", true),
            ("empty token", env("\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":\"\""), "sekrit", true),
            ("token not a string", env("\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":{\"expires\":1}"), "sekrit", true),
            ("missing token", env("\"applicationId\":\"app\",\"digest\":\"\(d)\""), "sekrit", true),
            ("duplicate keys, last wins", env("\"applicationId\":\"evil\",\"digest\":\"x\",\"token\":\(jsonString(claims)),\"applicationId\":\"app\",\"digest\":\"\(d)\""), "sekrit", true),
            ("UTF-8 BOM", wrap([0xEF, 0xBB, 0xBF] + envBytes), "sekrit", true),
            ("double UTF-8 BOM", wrap([0xEF, 0xBB, 0xBF, 0xEF, 0xBB, 0xBF] + envBytes), "sekrit", true),
            ("UTF-16LE", wrap(utf16(envelope, bigEndian: false, bom: false)), "sekrit", true),
            ("UTF-16BE", wrap(utf16(envelope, bigEndian: true, bom: false)), "sekrit", true),
            ("UTF-16 with BOM", wrap(utf16(envelope, bigEndian: false, bom: true)), "sekrit", true),
            ("UTF-32BE", wrap(utf32(envelope, bigEndian: true, bom: false)), "sekrit", true),
            ("UTF-32 with BOM", wrap(utf32(envelope, bigEndian: false, bom: true)), "sekrit", true),
            ("odd UTF-16", wrap(utf16(envelope, bigEndian: false, bom: false) + [0x20]), "sekrit", true),
            ("pretty envelope", wrap(Array("\r\n\t{ \"applicationId\" : \"app\" ,\n \"digest\" :\"\(d)\", \"token\": \(jsonString(claims)) }  \n".utf8)), "sekrit", true),
            ("extra envelope fields", env("\"x\":[1,{\"y\":null}],\"n\":NaN,\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims)),\"z\":-Infinity"), "sekrit", true),
            ("trailing comma", env("\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims)),"), "sekrit", true),
            ("escaped applicationId", signed(appId: "épp", claims: claims), "sekrit", true),
            ("raw control char", wrap(Array("{\"applicationId\":\"a\u{01}\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims))}".utf8)), "sekrit", true),
            ("invalid UTF-8", wrap(Array("{\"applicationId\":\"a".utf8) + [0xC3, 0x28] + Array("\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims))}".utf8)), "sekrit", true),
            ("UTF-8 surrogate in applicationId", wrap(Array("{\"applicationId\":\"a".utf8) + [0xED, 0xA0, 0x80] + Array("\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims))}".utf8)), "sekrit", true),
            ("escaped surrogate in digest", env("\"applicationId\":\"app\",\"digest\":\"\\ud800\",\"token\":\(jsonString(claims))"), "sekrit", true),
            ("bad escape", env("\"applicationId\":\"a\\x\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims))"), "sekrit", true),
            ("tampered claims", env("\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims.replacingOccurrences(of: "a/b", with: "a/c")))"), "sekrit", true),
            ("claims are an array", signed(claims: "[1]"), "sekrit", true),
            ("claims not JSON", signed(claims: "nope"), "sekrit", true),
            ("claims with BOM", signed(claims: "\u{FEFF}" + claims), "sekrit", true),
            ("claims with whitespace", signed(claims: " {\n\"expires\" : 1 , \"uri\":\"x\"}\t"), "sekrit", true),
            ("claims duplicate keys", signed(claims: #"{"expires":1,"uri":"a","expires":2}"#), "sekrit", true),
            ("claims carry applicationId", signed(claims: #"{"applicationId":"spoof","expires":3}"#), "sekrit", true),
            ("claims escaped pair", signed(claims: #"{"expires":1,"uri":"\ud83d\ude00\u00e9\/"}"#), "sekrit", true),
            // Python keeps the lone surrogate; Swift strings cannot, so only the code is compared.
            ("claims lone surrogate", signed(claims: #"{"expires":1,"uri":"\ud800x"}"#), "sekrit", false),
            ("claims nested 100", signed(claims: deep(100)), "sekrit", true),
            ("claims 4300-digit int", signed(claims: "{\"expires\":1,\"n\":" + String(repeating: "7", count: 4300) + "}"), "sekrit", true),
            ("claims 4301-digit int", signed(claims: "{\"expires\":1,\"n\":" + String(repeating: "7", count: 4301) + "}"), "sekrit", true),
            ("claims float expires", signed(claims: #"{"expires":1700000000000.75}"#), "sekrit", true),
        ]

        let py = try PythonOracle.verify(cases.map { .init(token: $0.1, secret: $0.2) })
        for (c, p) in zip(cases, py) {
            let swift = DigestToken.verify(c.1, secret: c.2)
            #expect(swift.code == mapped(p.code), "\(c.0): Swift \(swift.code), Python \(p.code)")
            if c.3, case .verified(let claims) = swift {
                #expect(pythonValueJSON(claims) == p.value, "\(c.0): decoded value differs")
            }
        }
        // Spot checks on what was decoded.
        if case .verified(let c) = DigestToken.verify(signed(claims: #"{"expires":1,"uri":"a","expires":2}"#), secret: "sekrit") {
            #expect(c.expires == 2)
            #expect(c.fields.map(\.name) == ["expires", "uri"])
        } else { Issue.record("duplicate-key claims not verified") }
        if case .verified(let c) = DigestToken.verify(signed(claims: #"{"expires":1,"uri":"\ud800x"}"#), secret: "sekrit") {
            #expect(c.uri == "\u{FFFD}x")
        } else { Issue.record("lone-surrogate claims not verified") }
    }

    @Test("deliberate divergences: Python verifies these, Swift answers badToken")
    func deliberateDivergences() throws {
        let deep = "{\"expires\":1,\"x\":" + String(repeating: "[", count: 600) + String(repeating: "]", count: 600) + "}"
        let cases: [(String, String)] = [
            ("no expires", signed(claims: #"{"uri":"x"}"#)),
            ("string expires", signed(claims: #"{"expires":"soon"}"#)),
            ("NaN expires", signed(claims: #"{"expires":NaN}"#)),
            ("expires beyond Int64", signed(claims: #"{"expires":99999999999999999999}"#)),
            ("capabilities not a list", signed(claims: #"{"expires":1,"capabilities":"streaming"}"#)),
            ("applyTags with a number", signed(claims: #"{"expires":1,"applyTags":["a",1]}"#)),
            ("type not a string", signed(claims: #"{"expires":1,"type":1}"#)),
            ("nesting 600", signed(claims: deep)),
            ("over 64 KiB", signed(claims: "{\"expires\":1,\"uri\":\"" + String(repeating: "u", count: 70_000) + "\"}")),
        ]
        let py = try PythonOracle.verify(cases.map { .init(token: $0.1, secret: "sekrit") })
        for (c, p) in zip(cases, py) {
            #expect(p.code == "verified", "\(c.0): Python said \(p.code)")
            #expect(DigestToken.verify(c.1, secret: "sekrit") == .badToken, "\(c.0)")
        }
    }

    @Test("random corruptions of a valid token give the same code in Swift and Python")
    func mutationDifferential() throws {
        let claims = #"{"expires":4102444800000,"type":"stream","requiredTag":"channelId:x/y","capabilities":["a","b"]}"#
        let valid = signed(claims: claims)
        let d = digestFor(appId: Array("app".utf8), secret: "sekrit", token: Array(claims.utf8))
        let envBytes = Array("{\"applicationId\":\"app\",\"digest\":\"\(d)\",\"token\":\(jsonString(claims))}".utf8)
        var rng = SeededRNG(seed: 77)
        var tokens: [String] = []
        let b64chars = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=  \n-_.*")
        for _ in 0..<300 {
            // Corrupt the base64 text.
            var chars = Array(valid.dropFirst(7))
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let i = Int.random(in: 0..<chars.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: chars[i] = b64chars.randomElement(using: &rng)!
                case 1: chars.remove(at: i)
                default: chars.insert(b64chars.randomElement(using: &rng)!, at: i)
                }
            }
            tokens.append("DIGEST:" + String(chars))
        }
        for _ in 0..<300 {
            // Corrupt the envelope JSON bytes, then encode properly.
            var bytes = envBytes
            for _ in 0..<Int.random(in: 1...2, using: &rng) {
                let i = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[i] = Bool.random(using: &rng) ? UInt8.random(in: 0...255, using: &rng)
                    : Array("{}[]\",:\\ 0aeu".utf8).randomElement(using: &rng)!
            }
            tokens.append(wrap(bytes))
        }
        let py = try PythonOracle.verify(tokens.map { .init(token: $0, secret: "sekrit") })
        var verified = 0
        for (t, p) in zip(tokens, py) {
            let swift = DigestToken.verify(t, secret: "sekrit")
            #expect(swift.code == mapped(p.code), "Swift \(swift.code), Python \(p.code) for \(t)")
            if case .verified(let c) = swift {
                verified += 1
                #expect(pythonValueJSON(c) == p.value)
            }
        }
        // Some corruptions (in ignored base64 junk) must still verify, or the test is too weak.
        #expect(verified > 0)
    }

    // MARK: - Swift-only behaviour

    @Test func wrongCredentialsAndTampering() throws {
        let token = try DigestTokenBuilder().expiresAt(milliseconds: 4_102_444_800_000).channel("c")
            .encode(applicationId: "app", secret: "secret")
        #expect(DigestToken.verify(token, applicationId: "app", secret: "wrong") == .badDigest)
        #expect(DigestToken.verify(token, applicationId: "other-app", secret: "secret") == .badDigest)
        // The HMAC key is applicationId + secret concatenated, exactly like Python.
        let shifted = try DigestTokenBuilder().expiresAt(milliseconds: 1).encode(applicationId: "ab", secret: "c")
        #expect(DigestToken.verify(shifted, secret: "c").code == "verified")

        let unverified = try DigestToken.decode(token)
        #expect(unverified.applicationId == "app")
        #expect(unverified.claims.requiredTag == .channelId("c"))
        let tamperedClaims = unverified.claims.json.replacingOccurrences(of: "channelId:c", with: "channelId:d")
        let tampered = wrap(Array("{\"applicationId\":\"app\",\"digest\":\"\(unverified.digest)\",\"token\":\(jsonString(tamperedClaims))}".utf8))
        #expect(DigestToken.verify(tampered, applicationId: "app", secret: "secret") == .badDigest)
        #expect(try DigestToken.decode(tampered).claims.requiredTag == .channelId("d"))
        // Flip one digest character.
        var digest = Array(unverified.digest)
        digest[0] = digest[0] == "A" ? "B" : "A"
        let badDigest = wrap(Array("{\"applicationId\":\"app\",\"digest\":\"\(String(digest))\",\"token\":\(jsonString(unverified.claims.json))}".utf8))
        #expect(DigestToken.verify(badDigest, applicationId: "app", secret: "secret") == .badDigest)
    }

    @Test func garbageIsRejected() throws {
        #expect(DigestToken.verify("", secret: "s") == .notADigestToken)
        #expect(DigestToken.verify("Bearer xyz", secret: "s") == .notADigestToken)
        #expect(DigestToken.verify("DIGEST", secret: "s") == .notADigestToken)
        #expect(DigestToken.verify("DIGEST:", secret: "s") == .badToken)
        #expect(DigestToken.verify("DIGEST:%%%", secret: "s") == .badToken)
        #expect(DigestToken.verify("DIGEST:" + String(repeating: "QUFB", count: 20_000), secret: "s") == .badToken)
        #expect(throws: DigestTokenError.notADigestToken) { try DigestToken.decode("nope") }
        #expect(throws: DigestTokenError.badToken) { try DigestToken.decode("DIGEST:e30=") }
        #expect(DigestToken.Verification.notADigestToken.code == "not-a-digest-token")
        #expect(DigestToken.Verification.badToken.code == "bad-token")
    }

    @Test func expiry() throws {
        let now = Date(timeIntervalSince1970: 1_700_000_000.5)
        let token = try DigestTokenBuilder().expiresIn(seconds: 60, now: now).encode(applicationId: "a", secret: "s")
        guard case .verified(let claims) = DigestToken.verify(token, applicationId: "a", secret: "s") else {
            Issue.record("not verified")
            return
        }
        #expect(claims.expires == 1_700_000_060_500)
        #expect(!claims.isExpired(now: now))
        #expect(!claims.isExpired(now: Date(timeIntervalSince1970: 1_700_000_060.499)))
        #expect(claims.isExpired(now: Date(timeIntervalSince1970: 1_700_000_060.5)))
        #expect(claims.isExpired(now: Date(timeIntervalSince1970: 1_800_000_000)))
        // Verification itself does not check expiry (same as Python).
        let old = try DigestTokenBuilder().expiresAt(milliseconds: 0).encode(applicationId: "a", secret: "s")
        guard case .verified(let oldClaims) = DigestToken.verify(old, secret: "s") else {
            Issue.record("not verified")
            return
        }
        #expect(oldClaims.isExpired(now: now))
        // Absurd inputs clamp instead of trapping.
        #expect(DigestTokenBuilder().expiresIn(seconds: .max, now: now).fields.first?.value == .number(String(Int64.max)))
    }

    @Test func builderErrorsAndAccessors() throws {
        #expect(throws: DigestTokenError.missingExpiry) { try DigestTokenBuilder().uri("x").encode(applicationId: "a", secret: "s") }
        #expect(throws: DigestTokenError.missingApplicationId) { try DigestTokenBuilder().expiresAt(milliseconds: 1).encode(applicationId: "", secret: "s") }
        #expect(throws: DigestTokenError.missingSecret) { try DigestTokenBuilder().expiresAt(milliseconds: 1).encode(applicationId: "a", secret: "") }

        let b = DigestTokenBuilder().expiresAt(milliseconds: 10).forPublishingOnly().capabilities(["b", "a", "b"])
            .roomAlias("lobby").sessionId("s1").remoteAddress("1.2.3.4").originStreamId("o1").uri("u")
            .applyTags(["t2", "t1"])
        #expect(b.json == #"{"expires":10,"type":"publish","capabilities":["a","b"],"requiredTag":"roomAlias:lobby","sessionId":"s1","remoteAddress":"1.2.3.4","originStreamId":"o1","uri":"u","applyTags":["t2","t1"]}"#)
        let claims = try DigestToken.decode(try b.encode(applicationId: "a", secret: "s")).claims
        #expect(claims.type == .publish)
        #expect(claims.capabilities == ["a", "b"])
        #expect(claims.requiredTag == .roomAlias("lobby"))
        #expect(claims.sessionId == "s1")
        #expect(claims.remoteAddress == "1.2.3.4")
        #expect(claims.originStreamId == "o1")
        #expect(claims.uri == "u")
        #expect(claims.applyTags == ["t2", "t1"])
        #expect(claims["expires"] == .number("10"))

        #expect(RequiredTag(rawValue: "channelId:a:b") == .channelId("a:b"))
        #expect(RequiredTag(rawValue: "channelAlias:x") == .channelAlias("x"))
        #expect(RequiredTag(rawValue: "roomId:r") == .roomId("r"))
        #expect(RequiredTag(rawValue: "other:x") == .raw("other:x"))
        #expect(TokenType(rawValue: "auth") == .auth)
        #expect(TokenType(rawValue: "stream") == .stream)
        #expect(TokenType(rawValue: "x") == .other("x"))
        // The Python builder's escaping, checked against known output.
        #expect(jsonString("é/\"\\\u{7F}\u{0}\n\u{2028}😀") == #""\u00e9/\"\\\u007f\u0000\n\u2028\ud83d\ude00""#)
    }

    @Test("random strings never crash verification (property)")
    func randomInputNeverCrashes() {
        var rng = SeededRNG(seed: 2024)
        for i in 0..<3000 {
            let token: String
            switch i % 3 {
            case 0: token = "DIGEST:" + String(decoding: rng.bytes(Int.random(in: 0...80, using: &rng)).map { $0 & 0x7F }, as: UTF8.self)
            case 1: token = wrap(rng.bytes(Int.random(in: 0...120, using: &rng)))
            default:
                let junk = String(decoding: rng.bytes(Int.random(in: 0...60, using: &rng)), as: UTF8.self)
                token = signed(claims: "{\"expires\":1," + junk + "}")
            }
            let result = DigestToken.verify(token, secret: "sekrit")
            #expect(result != .notADigestToken || !token.hasPrefix("DIGEST:"))
        }
    }
}
