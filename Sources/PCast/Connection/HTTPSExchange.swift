import Foundation
import PCastHTTPClient

/// One HTTP request trusting what the SDK's `wss://` connections trust (``SignalingTrust``:
/// ``PCastOptions/certificateAuthorityFile``), on ``OneShotHTTP``. The Express backend's calls and
/// the HLS player's requests go this way when the application names a private CA: Foundation's
/// URLSession on Linux cannot be given one. A rejected certificate is
/// ``PCastError/Code/certificateRejected`` with its reason, as on signaling.
struct HTTPSExchange: Sendable {
    var trust: SignalingTrust
    /// Connect, TLS, request and answer together.
    var timeout: Duration = .seconds(10)

    /// Sends `method` `url` with `headers` and `body`; the status and body of the answer.
    func send(_ method: String, _ url: URL, headers: [(String, String)] = [], body: Data? = nil) async throws(PCastError) -> OneShotHTTP.Response {
        // The trust's files are read as the TLS handler is made: a missing one fails there, typed.
        let secure = url.scheme?.lowercased() == "https"
        let diagnosis = CertificateDiagnosis()
        let trust = self.trust
        do {
            return try await OneShotHTTP.send(method, url, headers: headers, body: body, timeout: timeout) { host in
                try trust.makeHandler(host: host, diagnosis: diagnosis)
            }
        } catch {
            switch error {
            case .invalidURL: throw .invalidURI(url.absoluteString)
            case .transport(let cause):
                if let error = cause as? PCastError { throw error }
                if secure, let rejected = SignalingTrust.error(cause, url: url, diagnosis: diagnosis) { throw rejected }
                throw .connectionFailed("\(url.absoluteString): \(cause)")
            case .tooLarge, .incomplete: throw .connectionFailed("\(url.absoluteString): \(error)")
            }
        }
    }
}
