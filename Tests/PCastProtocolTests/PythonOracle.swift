import Foundation

/// Runs the `phenix-edge-auth` Python package as an independent oracle (and, through
/// ``runScript(_:_:package:count:)``, the other Python oracles). Missing python3 or a missing
/// package is an error (the tests fail), never a skip.
enum PythonOracle {
    /// One builder call, encoded as `[name, args...]` for the Python side.
    enum Op: Encodable {
        case uri(String)
        case capability(String)
        case expiresAtMilliseconds(Int64)
        /// `expires_at(datetime)` with a UTC datetime `micros` after the epoch.
        case expiresAtDate(micros: Int64)
        /// `expires_in_seconds(seconds)` with `datetime.now()` pinned to `micros` after the epoch.
        case expiresIn(seconds: Int, nowMicros: Int64)
        case auth, stream, publish
        case session(String), remoteAddress(String), originStream(String)
        case channel(String), channelAlias(String), room(String), roomAlias(String), tag(String)
        case applyTag(String)

        func encode(to encoder: Encoder) throws {
            var c = encoder.unkeyedContainer()
            switch self {
            case .uri(let v): try c.encode("uri"); try c.encode(v)
            case .capability(let v): try c.encode("capability"); try c.encode(v)
            case .expiresAtMilliseconds(let v): try c.encode("expiresAtMs"); try c.encode(v)
            case .expiresAtDate(let us): try c.encode("expiresAtDate"); try c.encode(us)
            case .expiresIn(let s, let us): try c.encode("expiresIn"); try c.encode(s); try c.encode(us)
            case .auth: try c.encode("auth")
            case .stream: try c.encode("stream")
            case .publish: try c.encode("publish")
            case .session(let v): try c.encode("session"); try c.encode(v)
            case .remoteAddress(let v): try c.encode("remoteAddress"); try c.encode(v)
            case .originStream(let v): try c.encode("originStream"); try c.encode(v)
            case .channel(let v): try c.encode("channel"); try c.encode(v)
            case .channelAlias(let v): try c.encode("channelAlias"); try c.encode(v)
            case .room(let v): try c.encode("room"); try c.encode(v)
            case .roomAlias(let v): try c.encode("roomAlias"); try c.encode(v)
            case .tag(let v): try c.encode("tag"); try c.encode(v)
            case .applyTag(let v): try c.encode("applyTag"); try c.encode(v)
            }
        }
    }

    struct BuildCase: Encodable {
        var appId: String
        var secret: String
        var ops: [Op]
    }

    struct BuildResult: Decodable {
        /// The encoded token.
        var token: String
        /// `json.dumps(builder.value(), separators=(',', ':'))`.
        var json: String
    }

    struct VerifyCase: Encodable {
        var token: String
        var secret: String
    }

    struct VerifyResult: Decodable {
        /// Python result code, e.g. "verified", "bad-token", "server-error".
        var code: String
        /// `json.dumps(result['value'], separators=(',', ':'))` when verified.
        var value: String?
    }

    private struct Request<C: Encodable>: Encodable {
        var mode: String
        var cases: [C]
    }

    static let script = #"""
import sys, json
from datetime import datetime, timezone, timedelta
try:
    import edgeauth.token_builder as tb
    from edgeauth.digest_tokens import DigestTokens
except Exception as e:
    sys.stderr.write("cannot import edgeauth (pip install phenix-edge-auth): %r\n" % (e,))
    sys.exit(3)

class FixedDateTime(datetime):
    fixed = None
    @classmethod
    def now(cls, tz=None):
        return cls.fixed

# The builder calls datetime.now() and checks isinstance(x, datetime) via its module global.
tb.datetime = FixedDateTime

def at(micros):
    d = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
    return FixedDateTime(d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond, tzinfo=timezone.utc)

req = json.load(sys.stdin)
out = []
if req['mode'] == 'build':
    for c in req['cases']:
        b = tb.TokenBuilder().with_application_id(c['appId']).with_secret(c['secret'])
        for op in c['ops']:
            n, a = op[0], op[1:]
            if n == 'uri': b.with_uri(a[0])
            elif n == 'capability': b.with_capability(a[0])
            # expires_at() only takes a datetime; this stores the int it would store.
            elif n == 'expiresAtMs': b.token['expires'] = int(a[0])
            elif n == 'expiresAtDate': b.expires_at(at(a[0]))
            elif n == 'expiresIn':
                FixedDateTime.fixed = at(a[1])
                b.expires_in_seconds(a[0])
            elif n == 'auth': b.for_authenticate_only()
            elif n == 'stream': b.for_streaming_only()
            elif n == 'publish': b.for_publishing_only()
            elif n == 'session': b.for_session(a[0])
            elif n == 'remoteAddress': b.for_remote_address(a[0])
            elif n == 'originStream': b.for_origin_stream(a[0])
            elif n == 'channel': b.for_channel(a[0])
            elif n == 'channelAlias': b.for_channel_alias(a[0])
            elif n == 'room': b.for_room(a[0])
            elif n == 'roomAlias': b.for_room_alias(a[0])
            elif n == 'tag': b.for_tag(a[0])
            elif n == 'applyTag': b.apply_tag(a[0])
            else: raise Exception('unknown op ' + n)
        out.append({'token': b.build(), 'json': json.dumps(b.value(), separators=(',', ':'))})
elif req['mode'] == 'verify':
    for c in req['cases']:
        r = DigestTokens().verify_and_decode(c['secret'], c['token'])
        v = json.dumps(r['value'], separators=(',', ':')) if 'value' in r else None
        out.append({'code': r['code'], 'value': v})
else:
    raise Exception('unknown mode')
json.dump(out, sys.stdout)
"""#

    static func build(_ cases: [BuildCase]) throws -> [BuildResult] {
        try run(Request(mode: "build", cases: cases), count: cases.count)
    }

    static func verify(_ cases: [VerifyCase]) throws -> [VerifyResult] {
        try run(Request(mode: "verify", cases: cases), count: cases.count)
    }

    private static func run<C: Encodable, R: Decodable>(_ request: Request<C>, count: Int) throws -> [R] {
        try runScript(script, request, package: "phenix-edge-auth", count: count)
    }

    /// Runs `script` with `python` (`python3` from PATH, or a path: python3-gi imports only in
    /// Debian's `/usr/bin/python3`), `input` as JSON on stdin, and decodes `count` results from
    /// the JSON array it prints. The script exits 3 when it cannot import `package`.
    static func runScript<Input: Encodable, R: Decodable>(_ script: String, _ input: Input, package: String, count: Int,
                                                          python: String = "python3") throws -> [R] {
        let input = try JSONEncoder().encode(input)
        let process = Process()
        if python.hasPrefix("/") {
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = ["-c", script]
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [python, "-c", script]
        }
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        do {
            try process.run()
        } catch {
            throw TestFailure("cannot start /usr/bin/env python3 (the Python oracle is required): \(error)")
        }
        // Drain stderr concurrently so a chatty failure cannot block the child on a full pipe.
        let errBox = DataBox()
        let errReader = Thread { errBox.data = stderr.fileHandleForReading.readDataToEndOfFile() }
        errReader.start()
        stdin.fileHandleForWriting.write(input)
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while !errBox.done { errBox.wait() }
        let err = String(decoding: errBox.data, as: UTF8.self)
        switch process.terminationStatus {
        case 0: break
        case 127:
            throw TestFailure("python3 not found on PATH; the oracle tests need python3 with `pip install \(package)`. \(err)")
        case 3:
            throw TestFailure("python3 is present but the \(package) package is missing: run `pip install \(package)` (scripts/setup.sh does). \(err)")
        default:
            throw TestFailure("Python oracle (\(package)) failed with status \(process.terminationStatus): \(err)")
        }
        let results = try JSONDecoder().decode([R].self, from: output)
        guard results.count == count else { throw TestFailure("oracle returned \(results.count) results for \(count) cases") }
        return results
    }
}

/// Hands stderr from the reader thread to the test thread.
private final class DataBox: @unchecked Sendable {
    private let condition = NSCondition()
    private var _data = Data()
    private var _done = false

    var data: Data {
        get { condition.lock(); defer { condition.unlock() }; return _data }
        set { condition.lock(); _data = newValue; _done = true; condition.broadcast(); condition.unlock() }
    }

    var done: Bool { condition.lock(); defer { condition.unlock() }; return _done }

    func wait() {
        condition.lock()
        while !_done { condition.wait() }
        condition.unlock()
    }
}
