import Foundation
import NIOCore
import NIOSSL
import Synchronization

/// What a `wss://` connection trusts (``PCastOptions/certificateAuthorityFile``,
/// ``PCastOptions/pinnedServerCertificateFile``).
struct SignalingTrust: Sendable, Hashable {
    /// Authorities trusted besides the system's.
    var certificateAuthorityFile: String?
    /// Exactly this leaf is trusted (no name check, no chain).
    var pinnedCertificateFile: String?

    /// What `options` trusts.
    init(_ options: PCastOptions) {
        self.init(certificateAuthorityFile: options.certificateAuthorityFile, pinnedCertificateFile: options.pinnedServerCertificateFile)
    }

    init(certificateAuthorityFile: String? = nil, pinnedCertificateFile: String? = nil) {
        self.certificateAuthorityFile = certificateAuthorityFile
        self.pinnedCertificateFile = pinnedCertificateFile
    }

    /// Whether anything besides the system's authorities is trusted (URLSession cannot be told).
    var isCustom: Bool { certificateAuthorityFile != nil || pinnedCertificateFile != nil }

    /// Reads the files named, so that a missing or unreadable one is said before any connection.
    func check() throws(PCastError) {
        if let pinned = pinnedCertificateFile { _ = try Self.readCertificates(pinned, what: "the server's certificate file") }
        if let file = certificateAuthorityFile { _ = try Self.readCertificates(file, what: "the certificate authority file") }
    }

    /// The TLS handler of one connection to `host`; it notes in `diagnosis` why a certificate failed.
    func makeHandler(host: String, diagnosis: CertificateDiagnosis) throws(PCastError) -> NIOSSLClientHandler {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["http/1.1"]
        // An IP literal is not a name to send in SNI; the certificate is then checked against the address.
        let serverName = Self.isIPAddress(host) ? nil : host
        do {
            if let pinned = pinnedCertificateFile {
                let expected = try Self.readCertificates(pinned, what: "the server's certificate file").first
                configuration.certificateVerification = .noHostnameVerification
                let context = try NIOSSLContext(configuration: configuration)
                let handler = try NIOSSLClientHandler(context: context, serverHostname: serverName) { presented, promise in
                    // The one certificate this client trusts, byte for byte.
                    let same = (try? presented.first?.toDERBytes()) == (try? expected?.toDERBytes()) && expected != nil
                    if !same { diagnosis.note("not the platform's own certificate (\(pinned))") }
                    promise.succeed(same ? .certificateVerified : .failed)
                }
                return handler
            }
            if let file = certificateAuthorityFile {
                let authorities = try Self.readCertificates(file, what: "the certificate authority file")
                configuration.additionalTrustRoots = [.certificates(authorities)]
            }
            let context = try NIOSSLContext(configuration: configuration)
            // The per-certificate callback only observes: it returns BoringSSL's own verdict and
            // notes why a certificate failed (NIOSSL's error says no more than "verify failed").
            let handler = try NIOSSLClientHandler(context: context, serverHostname: serverName,
                                                  verificationCallback: { verdict, certificate in
                if case .failed = verdict { diagnosis.note(certificate) }
                return verdict
            })
            return handler
        } catch let error as PCastError {
            throw error
        } catch {
            throw .connectionFailed("cannot set up TLS: \(error)")
        }
    }

    private static func readCertificates(_ path: String, what: String) throws(PCastError) -> [NIOSSLCertificate] {
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw .invalidRequest("\(what) \(path) cannot be read")
        }
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMFile(path)
        } catch {
            throw .invalidRequest("\(what) \(path) holds no PEM certificate")
        }
        guard !certificates.isEmpty else { throw .invalidRequest("\(what) \(path) holds no PEM certificate") }
        return certificates
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
    }

    /// The typed error for a failed `wss://` connection: a rejected certificate says why.
    static func error(_ error: any Error, url: URL, diagnosis: CertificateDiagnosis?) -> PCastError? {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return PCastError(code: .certificateRejected, detail: "\(url.host ?? "?"): it was issued for other names")
        }
        if let reason = diagnosis?.reason {
            return PCastError(code: .certificateRejected, detail: "\(url.host ?? "?"): \(reason)")
        }
        if case NIOSSLError.handshakeFailed(let inner) = error, "\(inner)".contains("CERTIFICATE_VERIFY_FAILED") {
            return PCastError(code: .certificateRejected, detail: "\(url.host ?? "?"): not trusted")
        }
        return nil
    }
}

/// Why the server's certificate failed verification, noted on the event loop during the handshake
/// and read once the connection attempt failed.
final class CertificateDiagnosis: Sendable {
    private let noted = Mutex<String?>(nil)

    var reason: String? { noted.withLock { $0 } }

    func note(_ reason: String) {
        noted.withLock { if $0 == nil { $0 = reason } }
    }

    /// The first failing certificate of the chain: out of its validity, or not trusted.
    func note(_ certificate: NIOSSLCertificate) {
        let now = time(nil)
        let format = Date.ISO8601FormatStyle().year().month().day()
        if certificate.notValidAfter < now {
            note("expired on \(Date(timeIntervalSince1970: TimeInterval(certificate.notValidAfter)).formatted(format))")
        } else if certificate.notValidBefore > now {
            note("not valid before \(Date(timeIntervalSince1970: TimeInterval(certificate.notValidBefore)).formatted(format))")
        } else {
            note("issued by an authority this client does not trust (PCastOptions.certificateAuthorityFile, pcast --ca-file)")
        }
    }
}
