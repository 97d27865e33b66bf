import Foundation
import PCastContracts
@testable import PCastServer
import PCastTestSupport
import PCastTLS
import Testing

@Suite("The TLS listener's parts: the redirect's Location, the certificate store's errors")
struct TLSListenerTests {
    @Test("the redirect keeps path and query, takes the Host header's name without its port, and ignores a Host that is not a name")
    func redirectLocation() {
        #expect(HTTPSRedirect.location(hostHeader: "example.com:80", fallbackHost: "srv", httpsPort: 443, target: "/whep/a?x=1")
                == "https://example.com/whep/a?x=1")
        #expect(HTTPSRedirect.location(hostHeader: "example.com", fallbackHost: "srv", httpsPort: 8443, target: "/")
                == "https://example.com:8443/")
        #expect(HTTPSRedirect.location(hostHeader: "[fd00::7]:80", fallbackHost: "srv", httpsPort: 443, target: "/healthz")
                == "https://[fd00::7]/healthz")
        for forged in ["evil.example/@x", "a b", "x@y", "[fd00::7", "[zz]", ""] {
            #expect(HTTPSRedirect.location(hostHeader: forged, fallbackHost: "srv", httpsPort: 443, target: "/p") == "https://srv/p", "\(forged)")
        }
        #expect(HTTPSRedirect.location(hostHeader: nil, fallbackHost: "srv", httpsPort: 443, target: "no-slash") == "https://srv/")
    }

    @Test("a missing file, a file that is not a certificate and a key that is not the certificate's are typed errors naming the file")
    func storeErrors() throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let missing = TLSFiles(certificateChain: certificates.directory + "/none.pem", privateKey: certificates.leaf.key)
        #expect(throws: TLSSetupError.self) { _ = try TLSCertificateStore(files: missing) }
        let notACertificate = TLSFiles(certificateChain: certificates.directory + "/ca.cnf", privateKey: certificates.leaf.key)
        do {
            _ = try TLSCertificateStore(files: notACertificate)
            Issue.record("a configuration file was read as a certificate")
        } catch {
            #expect(error.path.hasSuffix("ca.cnf"), "\(error)")
        }
        let mismatched = TLSFiles(certificateChain: certificates.leaf.certificate, privateKey: certificates.renewed.key)
        do {
            _ = try TLSCertificateStore(files: mismatched)
            Issue.record("a key of another certificate was accepted")
        } catch {
            #expect(error.path == certificates.renewed.key && error.reason.contains("does not belong"), "\(error)")
        }
        let store = try TLSCertificateStore(files: TLSFiles(certificateChain: certificates.leaf.certificate, privateKey: certificates.leaf.key))
        #expect(store.notValidAfter > Int(Date().timeIntervalSince1970))
    }
}
