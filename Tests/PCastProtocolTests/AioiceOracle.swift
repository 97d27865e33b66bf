import Foundation

/// aioice (aiortc's ICE agent, from PyPI) as an independent STUN implementation: it makes
/// connectivity checks as a controlling full agent does, and parses and verifies what we answer.
/// A missing python3 or package fails the test.
enum AioiceOracle {
    struct Check: Encodable {
        var username: String
        var password: String
        var nominate: Bool
    }

    struct MadeCheck: Decodable {
        var hex: String
        var transactionID: String
        var bytes: [UInt8] { Self.decode(hex) }

        static func decode(_ hex: String) -> [UInt8] {
            let digits = Array(hex)
            return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
        }
    }

    struct Parsed: Decodable, CustomStringConvertible {
        var messageClass: String
        var method: String
        var transactionID: String
        var fingerprint: Bool
        var integrity: Bool
        var mappedAddress: String?
        var errorCode: Int?
        var description: String { "\(messageClass) \(method) integrity \(integrity) address \(mappedAddress ?? "-") error \(errorCode ?? 0)" }
    }

    static let script = #"""
import sys, json
try:
    from aioice import stun
except Exception as e:
    sys.stderr.write("cannot import aioice (pip install aioice): %r\n" % (e,))
    sys.exit(3)

req = json.load(sys.stdin)
out = []
if req['mode'] == 'requests':
    for c in req['cases']:
        m = stun.Message(message_method=stun.Method.BINDING, message_class=stun.Class.REQUEST)
        m.attributes['USERNAME'] = c['username']
        m.attributes['PRIORITY'] = 1853824767
        m.attributes['ICE-CONTROLLING'] = 0x1122334455667788
        if c['nominate']:
            m.attributes['USE-CANDIDATE'] = None
        m.add_message_integrity(c['password'].encode())
        m.add_fingerprint()
        out.append({'hex': bytes(m).hex(), 'transactionID': m.transaction_id.hex()})
elif req['mode'] == 'parse':
    key = req['password'].encode() if req.get('password') is not None else None
    for h in req['cases']:
        data = bytes.fromhex(h)
        m = stun.parse_message(data)   # raises on a bad FINGERPRINT or length
        integrity = key is not None and m.check_message_integrity(key)
        address = m.attributes.get('XOR-MAPPED-ADDRESS')
        error = m.attributes.get('ERROR-CODE')
        out.append({
            'messageClass': m.message_class.name, 'method': m.message_method.name,
            'transactionID': m.transaction_id.hex(), 'fingerprint': 'FINGERPRINT' in m.attributes,
            'integrity': integrity,
            'mappedAddress': '%s:%d' % (address[0], address[1]) if address else None,
            'errorCode': error[0] if error else None,
        })
else:
    raise Exception('unknown mode')
json.dump(out, sys.stdout)
"""#

    private struct Request<C: Encodable>: Encodable {
        var mode: String
        var password: String?
        var cases: [C]
    }

    static func requests(_ checks: [Check]) throws -> [MadeCheck] {
        try PythonOracle.runScript(script, Request(mode: "requests", password: nil, cases: checks), package: "aioice", count: checks.count)
    }

    static func parse(_ datagrams: [[UInt8]], password: String?) throws -> [Parsed] {
        let hex = datagrams.map { $0.map { String(format: "%02x", $0) }.joined() }
        return try PythonOracle.runScript(script, Request(mode: "parse", password: password, cases: hex), package: "aioice", count: hex.count)
    }
}
