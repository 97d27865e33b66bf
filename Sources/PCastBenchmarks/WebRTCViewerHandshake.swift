import DTLS
import Glibc
import PCastProtocol
import PCastRelay
import SRTP

/// One WebRTC viewer's connection to the relay, as a browser makes it after its WHEP answer: an
/// ICE connectivity check (controlling, USE-CANDIDATE, MESSAGE-INTEGRITY with the relay's ice-pwd,
/// FINGERPRINT), repeated until a success response, then a DTLS-SRTP handshake as client over the
/// same transport (a UDP socket, or an ICE-TCP connection carrying RFC 4571 frames), retransmitting
/// on DTLS's own timer. Blocking, on the calling thread.
struct WebRTCViewerHandshake {
    enum Failure: Error, CustomStringConvertible {
        case noCheckAnswer
        case checkRefused(Int)
        case dtls(DTLSError)
        case timedOut

        var description: String {
            switch self {
            case .noCheckAnswer: "the relay answered no connectivity check"
            case .checkRefused(let code): "the relay refused the connectivity check (\(code))"
            case .dtls(let error): "DTLS: \(error)"
            case .timedOut: "the DTLS handshake did not finish in time"
            }
        }
    }

    let transport: any ViewerPacketTransport
    /// The relay's ICE credentials for this viewer (from the answer).
    let credentials: ICECredentials
    let remoteUfrag: String
    let dtls: DTLSEndpoint
    var deadlineNanoseconds: UInt64 = 5_000_000_000

    func run() throws(Failure) -> DTLSSRTPKeys {
        let started = monotonicNanoseconds()
        try check(until: started + deadlineNanoseconds)
        var outgoing = dtls.start()
        while true {
            for event in outgoing {
                switch event {
                case .send(let bytes): _ = transport.send(bytes)
                case .connected(let keys): return keys
                case .failed(let error): throw .dtls(error)
                case .closed: throw .dtls(.handshake("closed during the handshake"))
                }
            }
            let now = monotonicNanoseconds()
            guard now < started + deadlineNanoseconds else { throw .timedOut }
            let wait = min(dtls.timeoutMilliseconds ?? 100, 100)
            if let datagram = transport.receive(timeoutMilliseconds: wait), let first = datagram.first, (20...63).contains(first) {
                outgoing = dtls.receive(datagram)
            } else if dtls.timeoutMilliseconds == 0 {
                outgoing = dtls.handleTimeout()
            } else {
                outgoing = []
            }
        }
    }

    /// Sends the check every 50 ms until a success response arrives (the relay may not have the
    /// viewer yet: its control call is applied by the I/O thread).
    private func check(until deadline: UInt64) throws(Failure) {
        while monotonicNanoseconds() < deadline {
            let request = Self.connectivityCheck(credentials: credentials, remoteUfrag: remoteUfrag)
            _ = transport.send(request.bytes)
            let stop = monotonicNanoseconds() + 50_000_000
            while monotonicNanoseconds() < stop {
                guard let datagram = transport.receive(timeoutMilliseconds: 10) else { continue }
                guard let response = try? STUNMessage(decoding: datagram), response.transactionID == request.transactionID else { continue }
                if response.kind == .successResponse { return }
                // 401 before the relay has the viewer's credentials is expected; keep trying.
                if let code = response.errorCode?.code, code != 401 { throw .checkRefused(code) }
            }
        }
        throw .noCheckAnswer
    }

    /// A connectivity check as a controlling browser sends it (also what it sends later for
    /// consent freshness, RFC 7675): USE-CANDIDATE, MESSAGE-INTEGRITY with the relay's ice-pwd,
    /// FINGERPRINT.
    static func connectivityCheck(credentials: ICECredentials, remoteUfrag: String) -> (bytes: [UInt8], transactionID: [UInt8]) {
        var request = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
        request.username = "\(credentials.ufrag):\(remoteUfrag)"
        request.priority = 1_853_824_767
        request.iceControlling = 0x5EED
        request.useCandidate = true
        return (request.encoded(integrityKey: Array(credentials.password.utf8), fingerprint: true), request.transactionID)
    }
}
