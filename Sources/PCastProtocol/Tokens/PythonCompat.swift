// Internal re-implementations of the exact CPython behaviour that the `phenix-edge-auth` package
// relies on, so Swift accepts, rejects and produces the same bytes:
// - `base64.b64decode(s)` (non-validating binascii: skips junk, stops at complete padding),
// - `json.loads(bytes)` text decoding (`json.detect_encoding` + the 'surrogatepass' handler),
// - the `json` C scanner (NaN/Infinity, surrogate escapes, 4300-digit int limit, dict semantics),
// - `json.dumps(obj, separators=(',', ':'))` with its default `ensure_ascii=True`.
//
// Text is handled as arrays of code points (`[UInt32]`) because Python strings may contain lone
// surrogates, which Swift `String` cannot represent.

/// A decoded JSON value with Python `json` semantics.
indirect enum PyJSON: Equatable {
    case null
    case bool(Bool)
    /// Numeric literal exactly as written (including `NaN`, `Infinity`, `-Infinity`).
    case number([UInt32])
    case string([UInt32])
    case array([PyJSON])
    /// Keys in first-insertion order with the last value, like a Python dict built by `json`.
    case object([(key: [UInt32], value: PyJSON)])

    static func == (lhs: PyJSON, rhs: PyJSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)), let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: return false
        }
    }

    /// Last value for `key` (dict lookup).
    func member(_ key: String) -> PyJSON? {
        guard case .object(let members) = self else { return nil }
        let k = key.unicodeScalars.map(\.value)
        return members.first { $0.key == k }?.value
    }
}

enum PythonCompat {
    // MARK: base64

    private static let base64DecodeTable: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        return t
    }()

    /// `binascii.a2b_base64(data, strict_mode=False)`: characters outside the alphabet are skipped,
    /// decoding stops at the first complete padding, and a dangling partial quantum is an error.
    static func base64DecodeLenient<C: Collection>(_ ascii: C) -> [UInt8]? where C.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(ascii.count / 4 * 3 + 3)
        var quadPos = 0
        var leftChar: UInt8 = 0
        var pads = 0
        for ch in ascii {
            if ch == UInt8(ascii: "=") {
                pads += 1
                if quadPos >= 2 && quadPos + pads >= 4 { return out }
                continue
            }
            let v = base64DecodeTable[Int(ch)]
            if v >= 64 { continue }
            pads = 0
            switch quadPos {
            case 0:
                quadPos = 1
                leftChar = v
            case 1:
                quadPos = 2
                out.append(leftChar << 2 | v >> 4)
                leftChar = v & 0x0F
            case 2:
                quadPos = 3
                out.append(leftChar << 4 | v >> 2)
                leftChar = v & 0x03
            default:
                quadPos = 0
                out.append(leftChar << 6 | v)
                leftChar = 0
            }
        }
        return quadPos == 0 ? out : nil
    }

    private static let base64Alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Standard base64 with padding (`base64.b64encode`).
    static func base64Encode<C: Collection>(_ bytes: C) -> [UInt8] where C.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var it = bytes.makeIterator()
        while let a = it.next() {
            let b = it.next()
            let c = b == nil ? nil : it.next()
            let n = UInt32(a) << 16 | UInt32(b ?? 0) << 8 | UInt32(c ?? 0)
            out.append(base64Alphabet[Int(n >> 18 & 63)])
            out.append(base64Alphabet[Int(n >> 12 & 63)])
            out.append(b == nil ? UInt8(ascii: "=") : base64Alphabet[Int(n >> 6 & 63)])
            out.append(c == nil ? UInt8(ascii: "=") : base64Alphabet[Int(n & 63)])
        }
        return out
    }

    // MARK: text decoding for json.loads(bytes)

    /// `bytes.decode(json.detect_encoding(b), 'surrogatepass')`.
    static func decodeJSONBytes(_ b: [UInt8]) -> [UInt32]? {
        func starts(_ p: [UInt8]) -> Bool { b.count >= p.count && b[0..<p.count].elementsEqual(p) }
        if starts([0x00, 0x00, 0xFE, 0xFF]) { return decodeUTF32(b[4...], bigEndian: true) }
        if starts([0xFF, 0xFE, 0x00, 0x00]) { return decodeUTF32(b[4...], bigEndian: false) }
        if starts([0xFE, 0xFF]) { return decodeUTF16(b[2...], bigEndian: true) }
        if starts([0xFF, 0xFE]) { return decodeUTF16(b[2...], bigEndian: false) }
        if starts([0xEF, 0xBB, 0xBF]) { return decodeUTF8SurrogatePass(b[3...]) }
        if b.count >= 4 {
            if b[0] == 0 { return b[1] != 0 ? decodeUTF16(b[...], bigEndian: true) : decodeUTF32(b[...], bigEndian: true) }
            if b[1] == 0 {
                return b[2] != 0 || b[3] != 0 ? decodeUTF16(b[...], bigEndian: false) : decodeUTF32(b[...], bigEndian: false)
            }
        } else if b.count == 2 {
            if b[0] == 0 { return decodeUTF16(b[...], bigEndian: true) }
            if b[1] == 0 { return decodeUTF16(b[...], bigEndian: false) }
        }
        return decodeUTF8SurrogatePass(b[...])
    }

    /// Strict UTF-8 except that encoded surrogates (ED A0..BF xx) are passed through as code points.
    static func decodeUTF8SurrogatePass(_ b: ArraySlice<UInt8>) -> [UInt32]? {
        var out: [UInt32] = []
        out.reserveCapacity(b.count)
        var i = b.startIndex
        let end = b.endIndex
        @inline(__always) func cont(_ j: Int) -> UInt32? {
            guard j < end, b[j] & 0xC0 == 0x80 else { return nil }
            return UInt32(b[j] & 0x3F)
        }
        while i < end {
            let c0 = b[i]
            if c0 < 0x80 {
                out.append(UInt32(c0))
                i += 1
            } else if c0 >= 0xC2 && c0 <= 0xDF {
                guard let c1 = cont(i + 1) else { return nil }
                out.append(UInt32(c0 & 0x1F) << 6 | c1)
                i += 2
            } else if c0 >= 0xE0 && c0 <= 0xEF {
                guard let c1 = cont(i + 1), let c2 = cont(i + 2) else { return nil }
                let cp = UInt32(c0 & 0x0F) << 12 | c1 << 6 | c2
                guard cp >= 0x800 else { return nil }  // overlong
                out.append(cp)
                i += 3
            } else if c0 >= 0xF0 && c0 <= 0xF4 {
                guard let c1 = cont(i + 1), let c2 = cont(i + 2), let c3 = cont(i + 3) else { return nil }
                let cp = UInt32(c0 & 0x07) << 18 | c1 << 12 | c2 << 6 | c3
                guard cp >= 0x1_0000, cp <= 0x10_FFFF else { return nil }
                out.append(cp)
                i += 4
            } else {
                return nil
            }
        }
        return out
    }

    /// UTF-16 with 'surrogatepass': valid pairs combine, lone surrogates pass through.
    static func decodeUTF16(_ b: ArraySlice<UInt8>, bigEndian: Bool) -> [UInt32]? {
        guard b.count % 2 == 0 else { return nil }
        var units: [UInt32] = []
        units.reserveCapacity(b.count / 2)
        var i = b.startIndex
        while i < b.endIndex {
            let hi = UInt32(b[i]), lo = UInt32(b[i + 1])
            units.append(bigEndian ? hi << 8 | lo : lo << 8 | hi)
            i += 2
        }
        var out: [UInt32] = []
        out.reserveCapacity(units.count)
        var j = 0
        while j < units.count {
            let u = units[j]
            if (0xD800...0xDBFF).contains(u), j + 1 < units.count, (0xDC00...0xDFFF).contains(units[j + 1]) {
                out.append(0x1_0000 + ((u - 0xD800) << 10) + (units[j + 1] - 0xDC00))
                j += 2
            } else {
                out.append(u)
                j += 1
            }
        }
        return out
    }

    /// UTF-32 with 'surrogatepass': anything up to U+10FFFF, surrogates included.
    static func decodeUTF32(_ b: ArraySlice<UInt8>, bigEndian: Bool) -> [UInt32]? {
        guard b.count % 4 == 0 else { return nil }
        var out: [UInt32] = []
        out.reserveCapacity(b.count / 4)
        var i = b.startIndex
        while i < b.endIndex {
            let x = (0..<4).reduce(UInt32(0)) { acc, k in
                acc << 8 | UInt32(b[i + (bigEndian ? k : 3 - k)])
            }
            guard x <= 0x10_FFFF else { return nil }
            out.append(x)
            i += 4
        }
        return out
    }

    /// `str.encode('utf-8')`: fails on lone surrogates.
    static func encodeUTF8(_ cps: [UInt32]) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(cps.count)
        for cp in cps {
            guard let s = Unicode.Scalar(cp) else { return nil }
            out.append(contentsOf: UTF8.encode(s)!)
        }
        return out
    }

    /// Code points to a Swift string; lone surrogates become U+FFFD.
    static func string(_ cps: [UInt32]) -> String {
        var s = String.UnicodeScalarView()
        for cp in cps { s.append(Unicode.Scalar(cp) ?? "\u{FFFD}") }
        return String(s)
    }

    // MARK: json.loads

    /// Deepest array/object nesting accepted. CPython's own limit comes from its recursion limit
    /// (about 990 levels from a shallow call site); we stop earlier and parse iteratively so no
    /// input can exhaust the stack.
    static let maximumJSONDepth = 512
    /// CPython's default `sys.get_int_max_str_digits()`; longer integer literals raise ValueError.
    static let maximumIntegerDigits = 4300

    private enum Container {
        case array([PyJSON])
        case object([(key: [UInt32], value: PyJSON)], index: [[UInt32]: Int], key: [UInt32])
    }

    private static let quote: UInt32 = 0x22, backslash: UInt32 = 0x5C

    @inline(__always)
    private static func isWhitespace(_ c: UInt32) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D }

    /// `json.loads(s)` for a `str` (rejects a leading U+FEFF like CPython does).
    static func parseJSON(_ s: [UInt32]) -> PyJSON? {
        let n = s.count
        if n > 0 && s[0] == 0xFEFF { return nil }
        var i = 0
        func skipWS() { while i < n && isWhitespace(s[i]) { i += 1 } }
        func matches(_ word: String) -> Bool {
            let w = word.unicodeScalars.map(\.value)
            guard i + w.count <= n, s[i..<(i + w.count)].elementsEqual(w) else { return false }
            i += w.count
            return true
        }
        /// Reads `"key"` then `:` and surrounding whitespace, leaving `i` at the value.
        func objectKey() -> [UInt32]? {
            guard i < n, s[i] == quote else { return nil }
            i += 1
            guard let key = scanString(s, &i) else { return nil }
            skipWS()
            guard i < n, s[i] == 0x3A else { return nil }
            i += 1
            skipWS()
            return key
        }

        var stack: [Container] = []
        skipWS()
        parseValue: while true {
            guard i < n else { return nil }
            var value: PyJSON
            switch s[i] {
            case 0x7B:  // {
                i += 1
                skipWS()
                if i < n && s[i] == 0x7D {
                    i += 1
                    value = .object([])
                } else {
                    guard stack.count < maximumJSONDepth, let key = objectKey() else { return nil }
                    stack.append(.object([], index: [:], key: key))
                    continue parseValue
                }
            case 0x5B:  // [
                i += 1
                skipWS()
                if i < n && s[i] == 0x5D {
                    i += 1
                    value = .array([])
                } else {
                    guard stack.count < maximumJSONDepth else { return nil }
                    stack.append(.array([]))
                    continue parseValue
                }
            case quote:
                i += 1
                guard let str = scanString(s, &i) else { return nil }
                value = .string(str)
            default:
                let start = i
                if matches("null") { value = .null }
                else if matches("true") { value = .bool(true) }
                else if matches("false") { value = .bool(false) }
                else if matches("NaN") || matches("Infinity") || matches("-Infinity") {
                    value = .number(Array(s[start..<i]))
                } else {
                    guard let num = scanNumber(s, &i) else { return nil }
                    value = .number(num)
                }
            }

            // Attach the finished value to enclosing containers, closing those that end here.
            while true {
                guard let top = stack.popLast() else {
                    skipWS()
                    return i == n ? value : nil
                }
                switch top {
                case .array(var items):
                    items.append(value)
                    skipWS()
                    guard i < n else { return nil }
                    if s[i] == 0x2C {
                        i += 1
                        skipWS()
                        stack.append(.array(items))
                        continue parseValue
                    }
                    guard s[i] == 0x5D else { return nil }
                    i += 1
                    value = .array(items)
                case .object(var members, var index, let key):
                    if let existing = index[key] {
                        members[existing].value = value
                    } else {
                        index[key] = members.count
                        members.append((key, value))
                    }
                    skipWS()
                    guard i < n else { return nil }
                    if s[i] == 0x2C {
                        i += 1
                        skipWS()
                        guard let next = objectKey() else { return nil }
                        stack.append(.object(members, index: index, key: next))
                        continue parseValue
                    }
                    guard s[i] == 0x7D else { return nil }
                    i += 1
                    value = .object(members)
                }
            }
        }
    }

    /// Scans a string body after the opening quote (json's `scanstring`, strict mode).
    private static func scanString(_ s: [UInt32], _ i: inout Int) -> [UInt32]? {
        let n = s.count
        var out: [UInt32] = []
        func hex4(at j: Int) -> UInt32? {
            guard j + 4 <= n else { return nil }
            var v: UInt32 = 0
            for k in j..<(j + 4) {
                let c = s[k]
                let d: UInt32
                switch c {
                case 0x30...0x39: d = c - 0x30
                case 0x61...0x66: d = c - 0x61 + 10
                case 0x41...0x46: d = c - 0x41 + 10
                default: return nil
                }
                v = v << 4 | d
            }
            return v
        }
        while true {
            guard i < n else { return nil }
            let c = s[i]
            if c == quote {
                i += 1
                return out
            }
            if c < 0x20 { return nil }  // strict: raw control characters are invalid
            if c != backslash {
                out.append(c)
                i += 1
                continue
            }
            guard i + 1 < n else { return nil }
            let e = s[i + 1]
            switch e {
            case 0x22, 0x5C, 0x2F: out.append(e)
            case 0x62: out.append(0x08)
            case 0x66: out.append(0x0C)
            case 0x6E: out.append(0x0A)
            case 0x72: out.append(0x0D)
            case 0x74: out.append(0x09)
            case 0x75:
                guard var cp = hex4(at: i + 2) else { return nil }
                var consumed = 6
                // A high surrogate escape followed by a low surrogate escape forms one code point;
                // anything else leaves the surrogate alone (CPython keeps lone surrogates).
                if (0xD800...0xDBFF).contains(cp), i + 7 < n, s[i + 6] == backslash, s[i + 7] == 0x75 {
                    guard let low = hex4(at: i + 8) else { return nil }
                    if (0xDC00...0xDFFF).contains(low) {
                        cp = 0x1_0000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                        consumed = 12
                    }
                }
                out.append(cp)
                i += consumed
                continue
            default:
                return nil
            }
            i += 2
        }
    }

    /// JSON number grammar; integers longer than CPython's digit limit are rejected like
    /// `int()` does.
    private static func scanNumber(_ s: [UInt32], _ i: inout Int) -> [UInt32]? {
        let n = s.count
        let start = i
        func isDigit(_ j: Int) -> Bool { j < n && (0x30...0x39).contains(s[j]) }
        if i < n && s[i] == 0x2D { i += 1 }
        guard isDigit(i) else { return nil }
        if s[i] == 0x30 {
            i += 1
        } else {
            while isDigit(i) { i += 1 }
        }
        var isFloat = false
        if i < n && s[i] == 0x2E && isDigit(i + 1) {
            isFloat = true
            i += 1
            while isDigit(i) { i += 1 }
        }
        if i < n && (s[i] == 0x65 || s[i] == 0x45) {
            let eStart = i
            i += 1
            if i < n && (s[i] == 0x2B || s[i] == 0x2D) { i += 1 }
            if isDigit(i) {
                while isDigit(i) { i += 1 }
                isFloat = true
            } else {
                i = eStart  // backtrack; the caller then sees unexpected data
            }
        }
        if !isFloat {
            let digits = i - start - (s[start] == 0x2D ? 1 : 0)
            if digits > maximumIntegerDigits { return nil }
        }
        return Array(s[start..<i])
    }

    // MARK: json.dumps

    private static let hexDigits = Array("0123456789abcdef".unicodeScalars)

    /// Appends `s` as a JSON string the way `json.dumps(..., ensure_ascii=True)` writes it.
    static func appendJSONString(_ s: String, to out: inout String) {
        out.unicodeScalars.append("\"")
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            case " "..."~": out.unicodeScalars.append(scalar)
            default:
                let v = scalar.value
                if v < 0x1_0000 {
                    appendEscape(UInt16(v), to: &out)
                } else {
                    let x = v - 0x1_0000
                    appendEscape(UInt16(0xD800 + (x >> 10)), to: &out)
                    appendEscape(UInt16(0xDC00 + (x & 0x3FF)), to: &out)
                }
            }
        }
        out.unicodeScalars.append("\"")
    }

    private static func appendEscape(_ unit: UInt16, to out: inout String) {
        out += "\\u"
        for shift in stride(from: 12, through: 0, by: -4) {
            out.unicodeScalars.append(hexDigits[Int(unit >> UInt16(shift) & 0xF)])
        }
    }
}
