//! TLS for the listener (`[http] tls_cert_file` / `tls_key_file`): rustls with the ring
//! provider, the PEM certificate chain and key read at start.
//!
//! Invariants: handshakes run concurrently, each within [`HANDSHAKE_TIMEOUT`], so a client
//! that never finishes one cannot stall the others (nor `/healthz`); a failed handshake is
//! logged at debug and dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The acceptor for `cert` (PEM chain, leaf first) and `key` (PEM, PKCS#8, PKCS#1 or SEC1).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "TLS certificate {}: no certificate in the file",
            cert.display()
        ));
    }
    // The error never quotes the key.
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("TLS key {}: not a PEM private key ({e})", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("TLS certificate and key do not go together: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

type Handshake = (
    Result<std::io::Result<TlsStream<TcpStream>>, tokio::time::error::Elapsed>,
    SocketAddr,
);

/// A TCP listener whose connections are TLS streams.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Handshake>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> Self {
        Self {
            tcp,
            acceptor,
            handshakes: JoinSet::new(),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, addr)) => {
                        let acceptor = self.acceptor.clone();
                        self.handshakes.spawn(async move {
                            (tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await, addr)
                        });
                    }
                    // Out of file descriptors and the like: wait a little, as axum does.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => match done {
                    Ok((Ok(Ok(tls)), addr)) => return (tls, addr),
                    Ok((Ok(Err(e)), addr)) => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
                    Ok((Err(_), addr)) => tracing::debug!(%addr, "TLS handshake timed out"),
                    Err(_) => {}
                },
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
