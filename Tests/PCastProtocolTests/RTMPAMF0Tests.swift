@testable import PCastProtocol
import PCastTestSupport
import Testing

@Suite("AMF0")
struct RTMPAMF0Tests {
    @Test("known encodings of each type")
    func knownEncodings() throws {
        #expect(try AMF0.encode(.number(1)) == hex("00 3FF0000000000000"))
        #expect(try AMF0.encode(.boolean(true)) == [0x01, 0x01])
        #expect(try AMF0.encode(.boolean(false)) == [0x01, 0x00])
        #expect(try AMF0.encode(.string("connect")) == hex("02 0007") + Array("connect".utf8))
        #expect(try AMF0.encode(.null) == [0x05])
        #expect(try AMF0.encode(.undefined) == [0x06])
        #expect(try AMF0.encode(.object(["app": "live"])) == hex("03 0003 617070 02 0004 6C697665 000009"))
        #expect(try AMF0.encode(.ecmaArray(["a": 2])) == hex("08 00000001 0001 61 00 4000000000000000 000009"))
        #expect(try AMF0.encode(.strictArray([.null, true])) == hex("0A 00000002 05 0101"))
        #expect(try AMF0.encode(.date(millisecondsSince1970: 0, timeZone: -60)) == hex("0B 0000000000000000 FFC4"))
        let long = String(repeating: "x", count: 70_000)
        let encoded = try AMF0.encode(.string(long))
        #expect(encoded.prefix(5) == [0x0C, 0x00, 0x01, 0x11, 0x70][...])
        #expect(encoded.count == 5 + 70_000)
    }

    @Test("decodes an ffmpeg-style connect command")
    func decodeConnect() throws {
        // "connect", 1, {app: "live", type: "nonprivate", flashVer: "FMLE/3.0", tcUrl: "rtmp://h/live"}
        var bytes = hex("02 0007") + Array("connect".utf8) + hex("00 3FF0000000000000 03")
        for (k, v) in [("app", "live"), ("type", "nonprivate"), ("flashVer", "FMLE/3.0"), ("tcUrl", "rtmp://h/live")] {
            bytes += [0, UInt8(k.utf8.count)] + Array(k.utf8) + [0x02, 0, UInt8(v.utf8.count)] + Array(v.utf8)
        }
        bytes += hex("000009")
        let command = try RTMPCommand(parsing: bytes)
        #expect(command.name == "connect")
        #expect(command.transactionID == 1)
        #expect(command.commandObject["app"] == "live")
        #expect(command.commandObject.objectValue?.properties.map(\.key) == ["app", "type", "flashVer", "tcUrl"])
        #expect(command.arguments.isEmpty)
        #expect(try command.encoded() == bytes)
    }

    @Test("every type round-trips, nested, with key order and duplicates kept")
    func roundTrip() throws {
        let inner: AMF0Object = ["z": 1, "a": .null, "z ": .undefined, "é": "ü"]
        var dup = AMF0Object()
        dup.properties = [.init(key: "k", value: 1), .init(key: "k", value: 2)]
        let values: [AMF0Value] = [
            .number(-0.5), .number(.infinity), .number(1e300), .boolean(true), .string(""), .string("héllo ✓"),
            .string(String(repeating: "ab", count: 40_000)), .object(inner), .object([:]), .ecmaArray(inner),
            .ecmaArray([:]), .strictArray([]), .strictArray([.object(["x": .strictArray([1, "two", .null])]), .undefined]),
            .date(millisecondsSince1970: 1.7e12, timeZone: 0), .null, .undefined, .object(dup),
            .object(["": 5]),  // an empty key followed by a value is a property, not the end marker
        ]
        let decoded = try AMF0.decode(try AMF0.encode(values))
        #expect(decoded == values)
        #expect(decoded[16]["k"] == 1)
    }

    @Test("object subscripts replace, append and remove")
    func objectSubscript() {
        var o: AMF0Object = ["a": 1, "b": 2]
        o["a"] = "x"
        o["c"] = true
        #expect(o.properties.map(\.key) == ["a", "b", "c"])
        #expect(o["a"]?.stringValue == "x")
        o["b"] = nil
        #expect(o.properties.map(\.key) == ["a", "c"])
        #expect(o["missing"] == nil)
        #expect(AMF0Value.number(3)["x"] == nil)
    }

    @Test("truncated strings, numbers and containers are typed errors")
    func truncated() {
        #expect(throws: AMF0Error.truncated(offset: 3, needed: 5, available: 1)) { try AMF0.decode(hex("02 0005 61")) }
        #expect(throws: AMF0Error.truncated(offset: 1, needed: 2, available: 1)) { try AMF0.decode(hex("02 00")) }
        #expect(throws: AMF0Error.truncated(offset: 5, needed: 0xFFFF_FFFF, available: 2)) { try AMF0.decode(hex("0C FFFFFFFF 6161")) }
        #expect(throws: AMF0Error.truncated(offset: 1, needed: 8, available: 3)) { try AMF0.decode(hex("00 3FF000")) }
        #expect(throws: AMF0Error.truncated(offset: 1, needed: 1, available: 0)) { try AMF0.decode(hex("01")) }
        // An object without its end marker.
        #expect(throws: AMF0Error.truncated(offset: 13, needed: 2, available: 0)) { try AMF0.decode(hex("03 0001 61 00 3FF0000000000000")) }
        // A strict array claiming 4 billion elements in 1 byte: refused before allocating.
        #expect(throws: AMF0Error.truncated(offset: 5, needed: 0xFFFF_FFFF, available: 1)) { try AMF0.decode(hex("0A FFFFFFFF 05")) }
        // Every proper prefix of a valid encoding either decodes (value boundary) or throws typed.
        let full = try! AMF0.encode([.string("publish"), .number(5), .null, .object(["a": .ecmaArray(["b": "c"])]), "live"])
        var boundaries = 0
        for cut in 0..<full.count {
            if (try? AMF0.decode(full[..<cut])) != nil { boundaries += 1 }
        }
        #expect(boundaries == 5)  // empty, after "publish", after 5, after null, after the object
    }

    @Test("depth bombs stop at the depth limit without recursing further")
    func depthBombs() {
        let limits = AMF0.Limits(maxDepth: 32, maxValues: 1_000_000)
        // 100,000 nested objects: {"a": {"a": {…
        let objects = [UInt8](repeating: 0, count: 0).withObjectNesting(100_000)
        #expect(throws: AMF0Error.depthLimitExceeded(limit: 32)) { try AMF0.decode(objects, limits: limits) }
        // 100,000 nested strict arrays of one element.
        var arrays: [UInt8] = []
        arrays.reserveCapacity(500_001)
        for _ in 0..<100_000 { arrays += [0x0A, 0, 0, 0, 1] }
        arrays += [0x05]
        #expect(throws: AMF0Error.depthLimitExceeded(limit: 32)) { try AMF0.decode(arrays, limits: limits) }
        // ECMA arrays too.
        var ecma: [UInt8] = []
        ecma.reserveCapacity(800_000)
        for _ in 0..<100_000 { ecma += [0x08, 0, 0, 0, 1, 0, 1, 0x61] }
        #expect(throws: AMF0Error.depthLimitExceeded(limit: 32)) { try AMF0.decode(ecma, limits: limits) }
        // Exactly at the limit is fine.
        #expect((try? AMF0.decode([UInt8]().withObjectNesting(32), limits: limits)) != nil)
        #expect(throws: AMF0Error.depthLimitExceeded(limit: 32)) { try AMF0.decode([UInt8]().withObjectNesting(33), limits: limits) }
    }

    @Test("value count is bounded")
    func valueBomb() {
        var bytes = hex("0A 00030000")
        bytes += [UInt8](repeating: 0x05, count: 0x30000)
        #expect(throws: AMF0Error.tooManyValues(limit: 65_536)) { try AMF0.decode(bytes) }
        #expect((try? AMF0.decode(bytes, limits: .init(maxDepth: 4, maxValues: 0x30001)))?.count == 1)
    }

    @Test("unsupported markers, stray object end and invalid UTF-8 are typed errors")
    func unsupported() {
        for marker: UInt8 in [0x04, 0x07, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0xFF] {
            #expect(throws: AMF0Error.unsupportedType(marker: marker, offset: 1)) { try AMF0.decode([0x05, marker, 0, 0, 0, 0]) }
        }
        #expect(throws: AMF0Error.unexpectedObjectEnd(offset: 0)) { try AMF0.decode([0x09]) }
        #expect(throws: AMF0Error.unexpectedObjectEnd(offset: 8)) { try AMF0.decode(hex("03 0001 61 05 0001 62 09")) }
        #expect(throws: AMF0Error.invalidUTF8(offset: 3)) { try AMF0.decode(hex("02 0002 C328")) }
        #expect(throws: AMF0Error.invalidUTF8(offset: 3)) { try AMF0.decode(hex("03 0001 FF 05 000009")) }
    }

    @Test("encoding refuses keys that do not fit 16 bits")
    func keyTooLong() {
        let key = String(repeating: "k", count: 65_536)
        #expect(throws: AMF0Error.keyTooLong(length: 65_536)) { try AMF0.encode(.object([key: 1])) }
        #expect((try? AMF0.encode(.object([String(repeating: "k", count: 65_535): 1]))) != nil)
    }

    @Test("mutated encodings never crash; whatever decodes re-encodes stably (seeded)")
    func fuzz() throws {
        var rng = SeededRNG(seed: 0xA3F0)
        let seeds: [[UInt8]] = try [
            AMF0.encode(["connect", 1, .object(["app": "live", "tcUrl": "rtmp://h/live", "fpad": false, "capabilities": 15])]),
            AMF0.encode(["@setDataFrame", "onMetaData", .ecmaArray(["width": 1280, "encoder": "Lavf", "stereo": true])]),
            AMF0.encode([.strictArray([.null, .undefined, .date(millisecondsSince1970: 5, timeZone: 0), .object(["a": .strictArray([1])])])]),
            AMF0.encode(["publish", 5, .null, .string(String(repeating: "t", count: 300)), "live"]),
        ]
        var accepted = 0, rejected = 0
        for _ in 0..<4000 {
            var bytes = seeds.randomElement(using: &rng)!
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let i = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: bytes[i] = UInt8.random(in: 0...255, using: &rng)
                case 1: bytes[i] = [0x00, 0x02, 0x03, 0x05, 0x08, 0x09, 0x0A, 0x0C, 0xFF].randomElement(using: &rng)!
                case 2: bytes.removeSubrange(i..<min(bytes.count, i + Int.random(in: 1...8, using: &rng)))
                default: bytes.insert(contentsOf: bytes[i..<min(bytes.count, i + 12)], at: i)
                }
                if bytes.isEmpty { bytes = [0x05] }
            }
            let values: [AMF0Value]
            do throws(AMF0Error) {
                values = try AMF0.decode(bytes, limits: .init(maxDepth: 8, maxValues: 512))
            } catch {
                rejected += 1
                continue
            }
            accepted += 1
            let once = try AMF0.encode(values)
            #expect(try AMF0.encode(try AMF0.decode(once)) == once)
        }
        #expect(accepted > 300 && rejected > 300, "accepted \(accepted), rejected \(rejected)")
    }
}

extension Array where Element == UInt8 {
    /// `self` followed by `depth` nested objects {"a": {"a": … null …}}.
    func withObjectNesting(_ depth: Int) -> [UInt8] {
        var bytes = self
        for _ in 0..<depth { bytes += [0x03, 0x00, 0x01, 0x61] }
        bytes.append(0x05)
        for _ in 0..<depth { bytes += [0x00, 0x00, 0x09] }
        return bytes
    }
}
