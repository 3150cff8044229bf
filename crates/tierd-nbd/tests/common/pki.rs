//! A throwaway X.509 setup for TLS tests (rcgen): a CA, a server certificate
//! for localhost signed by it, a client certificate signed by it, and an
//! unrelated CA with a client certificate of its own.
//!
//! `tierd-cli`'s tests include this file too (`#[path]`), so it depends on
//! nothing but rcgen and std.

#![allow(dead_code)]

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// PEM texts of the whole setup.
pub struct TestPki {
    pub ca_cert: String,
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: String,
    pub client_key: String,
    pub stranger_ca_cert: String,
    pub stranger_client_cert: String,
    pub stranger_client_key: String,
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// (certificate PEM, key PEM) for `names` (DNS names or IP addresses),
/// signed by `issuer`.
fn leaf(issuer: &CertifiedIssuer<'static, KeyPair>, names: &[&str]) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(
        names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    params.distinguished_name.push(DnType::CommonName, names[0]);
    let certificate = params.signed_by(&key, issuer).unwrap();
    (certificate.pem(), key.serialize_pem())
}

impl TestPki {
    pub fn new() -> TestPki {
        let ca = authority("tierd test CA");
        let (server_cert, server_key) = leaf(&ca, &["localhost", "127.0.0.1"]);
        let (client_cert, client_key) = leaf(&ca, &["client.test"]);
        let stranger = authority("some other CA");
        let (stranger_client_cert, stranger_client_key) = leaf(&stranger, &["client.test"]);
        TestPki {
            ca_cert: ca.pem(),
            server_cert,
            server_key,
            client_cert,
            client_key,
            stranger_ca_cert: stranger.pem(),
            stranger_client_cert,
            stranger_client_key,
        }
    }

    /// Writes the files under the names libnbd (`tls-certificates=DIR`),
    /// qemu (`tls-creds-x509,dir=DIR`) and nbdkit look for: ca-cert.pem,
    /// server-cert.pem, server-key.pem, client-cert.pem, client-key.pem
    /// (keys mode 0600). `stranger`, if given, gets the other CA's
    /// ca-cert.pem only.
    pub fn write(&self, directory: &Path, stranger: Option<&Path>) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(directory).unwrap();
        for (name, text) in [
            ("ca-cert.pem", &self.ca_cert),
            ("server-cert.pem", &self.server_cert),
            ("server-key.pem", &self.server_key),
            ("client-cert.pem", &self.client_cert),
            ("client-key.pem", &self.client_key),
        ] {
            let path = directory.join(name);
            std::fs::write(&path, text).unwrap();
            if name.ends_with("key.pem") {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
        }
        if let Some(stranger) = stranger {
            std::fs::create_dir_all(stranger).unwrap();
            std::fs::write(stranger.join("ca-cert.pem"), &self.stranger_ca_cert).unwrap();
        }
    }
}
