import Foundation
import PCastTestSupport
import Testing

/// A masked text frame (RFC 6455 §5.2; clients must mask) holding `text`.
private func maskedTextFrame(_ text: String) -> [UInt8] {
    let payload = Array(text.utf8)
    var frame: [UInt8] = [0x81]
    if payload.count < 126 {
        frame.append(0x80 | UInt8(payload.count))
    } else {
        frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xff)]
    }
    let mask = (0..<4).map { _ in UInt8.random(in: 0...255) }
    frame += mask
    frame += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
    return frame
}

/// The complete frames in `bytes` as a server sends them (unmasked): opcode and payload of each.
private func serverFrames(_ bytes: [UInt8]) -> [(opcode: UInt8, payload: [UInt8])] {
    var frames: [(opcode: UInt8, payload: [UInt8])] = []
    var index = 0
    while index + 2 <= bytes.count {
        let opcode = bytes[index] & 0x0f
        var length = Int(bytes[index + 1] & 0x7f)
        var start = index + 2
        if length == 126 {
            guard start + 2 <= bytes.count else { break }
            length = Int(bytes[start]) << 8 | Int(bytes[start + 1])
            start += 2
        } else if length == 127 {
            guard start + 8 <= bytes.count else { break }
            length = (0..<8).reduce(0) { $0 << 8 | Int(bytes[start + $1]) }
            start += 8
        }
        if bytes[index + 1] & 0x80 != 0 { start += 4 }
        guard start + length <= bytes.count else { break }
        frames.append((opcode: opcode, payload: Array(bytes[start..<(start + length)])))
        index = start + length
    }
    return frames
}

/// `pcast serve` stopped as `systemctl stop` stops it.
@Suite("pcast serve stopped with SIGTERM", .serialized)
struct ServeShutdownContractTests {
    @Test("SIGTERM to pcast serve: an authenticated signaling WebSocket receives a close frame with code 1001, and the process exits with status 0")
    func sigtermClosesSessionsWith1001() async throws {
        let serve = try await ServeProcess.start()
        defer { serve.stop() }
        let auth = try serve.token(["--type", "auth"])
        let port = serve.httpPort
        let connected = await RawTCP.offload { RawTCP.connect(to: port) }
        let fd = try #require(connected, "cannot connect to port \(port)")
        defer { RawTCP.close(fd) }
        let key = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        RawTCP.write(fd, "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\r\n")
        let headBytes = await RawTCP.offload { RawTCP.readHead(fd, timeout: 10) }
        let head = String(decoding: headBytes, as: UTF8.self)
        try #require(head.hasPrefix("HTTP/1.1 101"), "\(head)")

        RawTCP.write(fd, maskedTextFrame(#"{"v":1,"id":1,"type":"authenticate","payload":{"token":"\#(auth)"}}"#))
        var received: [UInt8] = []
        var authenticated = false
        let authenticating = ContinuousClock.now + .seconds(15)
        while !authenticated, ContinuousClock.now < authenticating {
            let (bytes, closed) = await RawTCP.offload { RawTCP.read(fd, timeout: 0.2) }
            received += bytes
            authenticated = serverFrames(received).contains { $0.opcode == 1 && String(decoding: $0.payload, as: UTF8.self).contains("\"authenticated\"") }
            if closed { break }
        }
        try #require(authenticated, "no authenticated reply: \(String(decoding: received, as: UTF8.self))\n\(serve.output)")

        kill(serve.process.pid, SIGTERM)
        var closeCode: UInt16?
        let closing = ContinuousClock.now + .seconds(20)
        while closeCode == nil, ContinuousClock.now < closing {
            let (bytes, closed) = await RawTCP.offload { RawTCP.read(fd, timeout: 0.2) }
            received += bytes
            if let close = serverFrames(received).first(where: { $0.opcode == 8 }), close.payload.count >= 2 {
                closeCode = UInt16(close.payload[0]) << 8 | UInt16(close.payload[1])
            }
            if closed { break }
        }
        #expect(closeCode == 1001, "close code \(String(describing: closeCode)); frames \(serverFrames(received).map { $0.opcode })\n\(serve.output)")
        let process = serve.process
        let status = await RawTCP.offload { process.wait(within: .seconds(20)) }
        #expect(status == 0, "exit status \(String(describing: status)) after SIGTERM\n\(serve.output)")
    }
}
