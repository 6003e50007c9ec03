//! A certificate authority made at start-up, and a server certificate for 127.0.0.1 and
//! localhost signed by it: clients trust the CA explicitly, verification stays on.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{RootCertStore, ServerConfig};

/// The test CA and a server configuration using a certificate it signed.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA certificate, DER.
    pub ca_der: CertificateDer<'static>,
    /// The CA certificate, PEM (for `--ca FILE`).
    pub ca_pem: String,
    /// The server certificate (for 127.0.0.1 and localhost, signed by the CA), PEM: for a
    /// server other than rustls (OpenSSL's `s_server` in the interop tests).
    pub server_cert_pem: String,
    /// The server certificate's private key, PKCS#8 PEM.
    pub server_key_pem: String,
    pub(crate) server: Arc<ServerConfig>,
}

impl TestPki {
    /// Generates a fresh CA and server certificate.
    pub fn generate() -> Result<Self, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "feedwire replay test CA");
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let key = KeyPair::generate()?;
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        let cert = params.signed_by(&key, &issuer)?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("aws-lc-rs supports the default protocol versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("rcgen made a matching key and certificate");
        Ok(Self {
            ca_der: ca_cert.der().clone(),
            ca_pem: ca_cert.pem(),
            server_cert_pem: cert.pem(),
            server_key_pem: key.serialize_pem(),
            server: Arc::new(server),
        })
    }

    /// The server side: the certificate for 127.0.0.1 and localhost, for a rustls
    /// `ServerConnection` driven in memory (benchmarks and tests without sockets).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// A root store holding only this CA.
    pub fn root_store(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca_der.clone())
            .expect("rcgen made a valid CA certificate");
        roots
    }
}
