//! A pod-resources server speaking the kubelet's protocol on a unix socket, serving a pod
//! list it is given: what `gpuwatch demo` serves for its simulated pods, and the kubelet the
//! tests talk to. It answers `List` (the one call gpuwatch makes) and says UNIMPLEMENTED to
//! anything else, like a kubelet without the feature gate would.

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http;

use super::proto::{LIST_PATH, ListPodResourcesRequest, ListPodResourcesResponse};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the server answers; change it while it runs (a pod that moves).
#[derive(Debug, Clone, Default)]
pub struct PodList {
    inner: Arc<Mutex<(ListPodResourcesResponse, Option<Duration>)>>,
}

impl PodList {
    pub fn set(&self, resp: ListPodResourcesResponse) {
        self.lock().0 = resp;
    }

    /// Answers only after `delay` (a kubelet that hangs), or at once with `None`.
    pub fn set_delay(&self, delay: Option<Duration>) {
        self.lock().1 = delay;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (ListPodResourcesResponse, Option<Duration>)> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Clone)]
struct Lister(PodList);

impl tonic::server::NamedService for Lister {
    const NAME: &'static str = "v1.PodResourcesLister";
}

struct List(PodList);

impl tonic::server::UnaryService<ListPodResourcesRequest> for List {
    type Response = ListPodResourcesResponse;
    type Future = BoxFuture<Result<tonic::Response<ListPodResourcesResponse>, tonic::Status>>;

    fn call(&mut self, _req: tonic::Request<ListPodResourcesRequest>) -> Self::Future {
        let (resp, delay) = self.0.lock().clone();
        Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            Ok(tonic::Response::new(resp))
        })
    }
}

impl tower::Service<http::Request<Body>> for Lister {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let pods = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != LIST_PATH {
                return Ok(tonic::Status::unimplemented("only List is served").into_http());
            }
            let codec = tonic_prost::ProstCodec::<ListPodResourcesResponse, ListPodResourcesRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.unary(List(pods), req).await)
        })
    }
}

/// Serves `pods` on a new unix socket at `path` until `shutdown` resolves.
pub async fn serve(
    path: &Path,
    pods: PodList,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_listener(tokio::net::UnixListener::bind(path)?, pods, shutdown).await
}

/// Serves `pods` on a bound listener until `shutdown` resolves.
pub async fn serve_listener(
    listener: tokio::net::UnixListener,
    pods: PodList,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(Lister(pods))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(std::io::Error::other)
}
