//! A pod-resources client on the kubelet's unix socket: tonic over a `UnixStream`, one
//! `List` per call with a deadline on connecting and answering; a [`Session`] keeps the
//! connection between calls and drops it after any failure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use super::proto::{LIST_PATH, ListPodResourcesRequest, ListPodResourcesResponse};

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error(
        "no kubelet pod-resources socket at {0} (is this a Kubernetes node, and is the socket's directory mounted?)"
    )]
    Missing(PathBuf),
    #[error(
        "permission denied on {0} (mount /var/lib/kubelet/pod-resources and run with access to it)"
    )]
    Permission(PathBuf),
    #[error("cannot connect to the kubelet at {path}: {error}")]
    Connect { path: PathBuf, error: String },
    #[error("the kubelet at {path} did not answer within {after:?}")]
    Timeout { path: PathBuf, after: Duration },
    #[error("the kubelet at {path} answered List with an error: {error}")]
    Status { path: PathBuf, error: String },
}

/// Calls `List` on the socket at `path` over a new connection; the whole call (connect and
/// answer) within `deadline`.
pub async fn list(
    path: &Path,
    deadline: Duration,
) -> Result<ListPodResourcesResponse, KubeletError> {
    Session::new(path).list(deadline).await
}

/// A connection to the kubelet kept between calls (the watcher's: one `List` every 30 s
/// should not cost a new HTTP/2 connection each time); dropped after any failure, so the
/// next call connects again.
#[derive(Debug)]
pub struct Session {
    path: PathBuf,
    channel: Option<Channel>,
}

impl Session {
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            channel: None,
        }
    }

    /// `List`, connecting first when there is no connection; within `deadline` in all.
    pub async fn list(
        &mut self,
        deadline: Duration,
    ) -> Result<ListPodResourcesResponse, KubeletError> {
        if let Err(e) = std::fs::metadata(&self.path) {
            self.channel = None;
            return Err(classify(&self.path, &e));
        }
        let r = match tokio::time::timeout(deadline, self.call()).await {
            Ok(r) => r,
            Err(_) => Err(KubeletError::Timeout {
                path: self.path.clone(),
                after: deadline,
            }),
        };
        if r.is_err() {
            self.channel = None;
        }
        r
    }

    async fn call(&mut self) -> Result<ListPodResourcesResponse, KubeletError> {
        let path = self.path.clone();
        let channel = match &self.channel {
            Some(c) => c.clone(),
            None => {
                let connect_path = path.clone();
                // The URI is required by the API and unused: the connector dials the socket.
                let c = Endpoint::from_static("http://kubelet.invalid")
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let p = connect_path.clone();
                        async move {
                            Ok::<_, std::io::Error>(TokioIo::new(
                                tokio::net::UnixStream::connect(p).await?,
                            ))
                        }
                    }))
                    .await
                    .map_err(|e| connect_error(&path, &e))?;
                self.channel = Some(c.clone());
                c
            }
        };
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| KubeletError::Connect {
            path: path.clone(),
            error: e.to_string(),
        })?;
        let codec =
            tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
        let resp = grpc
            .unary(
                tonic::Request::new(ListPodResourcesRequest {}),
                tonic::codegen::http::uri::PathAndQuery::from_static(LIST_PATH),
                codec,
            )
            .await
            .map_err(|s| KubeletError::Status {
                path: path.clone(),
                error: format!("{}: {}", s.code(), s.message()),
            })?;
        Ok(resp.into_inner())
    }
}

fn connect_error(path: &Path, e: &tonic::transport::Error) -> KubeletError {
    // The io error under the transport error says what went wrong (refused, denied).
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return classify(path, io);
        }
        source = s.source();
    }
    KubeletError::Connect {
        path: path.to_path_buf(),
        error: error_chain(e),
    }
}

/// What an io error on the socket means for the operator.
pub(super) fn classify(path: &Path, e: &std::io::Error) -> KubeletError {
    match e.kind() {
        std::io::ErrorKind::NotFound => KubeletError::Missing(path.to_path_buf()),
        std::io::ErrorKind::PermissionDenied => KubeletError::Permission(path.to_path_buf()),
        _ => KubeletError::Connect {
            path: path.to_path_buf(),
            error: e.to_string(),
        },
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
