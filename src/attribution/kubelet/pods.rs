//! Opt-in (`[kubernetes] kubelet_pods`): the job each pod works for, from the kubelet's
//! `/pods` (a `PodList` of the node's pods: their labels and owner references), so that a
//! multi-node job's `training_job` is its controller's name rather than a guess from pod
//! names (`crate::attribution::job`).
//!
//! The endpoint needs the `nodes/proxy` permission, which also allows running commands in
//! any pod of the node through the kubelet: that is why it is off by default
//! (examples/kubernetes/gpuwatch.yaml has the RBAC and the risk).
//!
//! Invariants: a pod's job comes only from what its controller wrote (known labels of the
//! Kubeflow training operator, JobSet, LeaderWorkerSet and Job, else its controlling owner
//! reference), never from its name; a refused request (401, 403) is reported once and not
//! repeated for [`REFUSED_RETRY`]; the token is read at each request and never logged.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

use crate::config::KubeletPods;

/// How long a refusal stands before `/pods` is asked again.
pub const REFUSED_RETRY: Duration = Duration::from_secs(600);

/// (namespace, pod) → the job its controller names.
pub type PodJobs = HashMap<(String, String), String>;

#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    #[error(
        "the kubelet refused {url} (HTTP {status}): the service account needs the nodes/proxy permission (examples/kubernetes/gpuwatch.yaml); training_job falls back to pod names"
    )]
    Refused { url: String, status: u16 },
    #[error("cannot read the kubelet's pods at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the kubelet's {url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("the kubelet's {url} did not answer a PodList: {reason}")]
    Malformed { url: String, reason: String },
    #[error("cannot read the service account token {path}: {reason}")]
    Token { path: String, reason: String },
    #[error("cannot set up the kubelet client: {0}")]
    Setup(String),
}

impl PodsError {
    pub fn is_refusal(&self) -> bool {
        matches!(self, PodsError::Refused { .. })
    }
}

#[derive(Debug, Deserialize)]
struct PodList {
    #[serde(default)]
    items: Vec<Pod>,
}

#[derive(Debug, Deserialize)]
struct Pod {
    metadata: Meta,
}

#[derive(Debug, Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    labels: HashMap<String, String>,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Vec<OwnerRef>,
}

#[derive(Debug, Deserialize)]
struct OwnerRef {
    kind: String,
    name: String,
    #[serde(default)]
    controller: Option<bool>,
}

/// The job a pod works for, by what its controller wrote on it.
fn job_of(m: &Meta) -> Option<String> {
    let label = |k: &str| m.labels.get(k).filter(|v| !v.is_empty()).cloned();
    // Kubeflow's training operator (PyTorchJob, MPIJob, TFJob, ...), v1 and older.
    if let Some(j) =
        label("training.kubeflow.org/job-name").or_else(|| label("kubeflow.org/job-name"))
    {
        return Some(j);
    }
    // A JobSet's pods carry their child Job's name too: the JobSet is the job.
    if let Some(j) = label("jobset.sigs.k8s.io/jobset-name") {
        return Some(j);
    }
    // A LeaderWorkerSet group (a leader and its workers) is one multi-node instance.
    if let Some(name) = label("leaderworkerset.sigs.k8s.io/name") {
        return Some(match label("leaderworkerset.sigs.k8s.io/group-index") {
            Some(g) => format!("{name}-{g}"),
            None => name,
        });
    }
    if let Some(j) = label("batch.kubernetes.io/job-name").or_else(|| label("job-name")) {
        return Some(j);
    }
    m.owner_references
        .iter()
        .find(|o| o.controller == Some(true) && !o.name.is_empty())
        .filter(|o| o.kind != "Node")
        .map(|o| o.name.clone())
}

/// The jobs of a `PodList` body.
pub fn parse(body: &[u8]) -> Result<PodJobs, String> {
    let list: PodList = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(list
        .items
        .iter()
        .filter_map(|p| {
            let job = job_of(&p.metadata)?;
            Some(((p.metadata.namespace.clone(), p.metadata.name.clone()), job))
        })
        .collect())
}

/// A client of one kubelet's `/pods`.
pub struct PodsClient {
    http: reqwest::Client,
    cfg: KubeletPods,
}

impl PodsClient {
    pub fn new(cfg: &KubeletPods) -> Result<Self, PodsError> {
        let mut b = crate::outbound::builder(Duration::from_secs(10));
        if let Some(ca) = cfg.ca_file.as_deref().filter(|p| p.exists()) {
            b = crate::outbound::add_ca_file(b, ca).map_err(PodsError::Setup)?;
        }
        if cfg.insecure_skip_verify {
            tracing::warn!(url = %cfg.url, "kubelet_insecure_skip_verify is set: the kubelet's certificate is not checked, so anyone on the path can read the service account token");
            b = b.danger_accept_invalid_certs(true);
        }
        Ok(Self {
            http: b.build().map_err(|e| PodsError::Setup(e.to_string()))?,
            cfg: cfg.clone(),
        })
    }

    /// The node's pods' jobs.
    pub async fn fetch(&self) -> Result<PodJobs, PodsError> {
        let url = self.cfg.url.clone();
        let token =
            std::fs::read_to_string(&self.cfg.token_file).map_err(|e| PodsError::Token {
                path: self.cfg.token_file.display().to_string(),
                reason: e.to_string(),
            })?;
        let resp = self
            .http
            .get(&url)
            .bearer_auth(token.trim())
            .send()
            .await
            .map_err(|e| PodsError::Unreachable {
                url: url.clone(),
                reason: crate::text::error_chain(&e.without_url()),
            })?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(PodsError::Refused { url, status });
        }
        if status != 200 {
            return Err(PodsError::Status { url, status });
        }
        let body = resp.bytes().await.map_err(|e| PodsError::Unreachable {
            url: url.clone(),
            reason: crate::text::error_chain(&e.without_url()),
        })?;
        parse(&body).map_err(|reason| PodsError::Malformed { url, reason })
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    /// The shape of a kubelet's `/pods` answer (a `v1.PodList`), trimmed to what matters:
    /// a PyTorchJob worker, a JobSet pod (which also carries its child Job's labels), a
    /// LeaderWorkerSet worker, an indexed Job's pod, a StatefulSet pod, a static pod and a
    /// bare pod.
    pub(crate) const POD_LIST: &str = r#"{
  "kind": "PodList", "apiVersion": "v1", "metadata": {},
  "items": [
    {"metadata": {"name": "llama-worker-3", "namespace": "research", "uid": "0d4c6a1e-5b7f-4e2a-9c3d-1f2e3d4c5b6a",
      "labels": {"training.kubeflow.org/job-name": "llama", "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "3"},
      "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama", "uid": "a1", "controller": true, "blockOwnerDeletion": true}]},
     "spec": {"nodeName": "gpu-node-7"}, "status": {"phase": "Running"}},
    {"metadata": {"name": "js-workers-0-3-x7k2p", "namespace": "research",
      "labels": {"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/replicatedjob-name": "workers", "batch.kubernetes.io/job-name": "js-workers-0", "job-name": "js-workers-0"},
      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "js-workers-0", "uid": "b2", "controller": true}]}},
    {"metadata": {"name": "lws-1-2", "namespace": "serve",
      "labels": {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "1", "leaderworkerset.sigs.k8s.io/worker-index": "2"},
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "lws-1", "uid": "c3", "controller": true}]}},
    {"metadata": {"name": "train-4-x7k2p", "namespace": "batch",
      "labels": {"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/job-completion-index": "4"},
      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "d4", "controller": true}]}},
    {"metadata": {"name": "sts-2", "namespace": "db",
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sts", "uid": "e5", "controller": true}]}},
    {"metadata": {"name": "kube-proxy-gpu-node-7", "namespace": "kube-system",
      "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "gpu-node-7", "uid": "f6", "controller": true}]}},
    {"metadata": {"name": "notebook", "namespace": "dev"}}
  ]
}"#;

    /// A kubelet's `/pods` on loopback (plain HTTP): answers `status` with `body`, and
    /// records the Authorization header it was sent.
    pub(crate) fn serve(
        status: u16,
        body: &'static str,
    ) -> (String, std::sync::mpsc::Receiver<String>) {
        use std::io::{BufRead, BufReader, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let mut r = BufReader::new(c.try_clone().expect("clone"));
                let mut auth = String::new();
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    if let Some(v) = line.strip_prefix("authorization: ") {
                        auth = v.trim().to_string();
                    }
                    line.clear();
                }
                let _ = tx.send(auth);
                let _ = write!(
                    c,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (format!("http://127.0.0.1:{port}/pods"), rx)
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{POD_LIST, serve};
    use super::*;

    #[test]
    fn each_controllers_job_from_a_pod_list() {
        let jobs = parse(POD_LIST.as_bytes()).expect("PodList");
        let get = |ns: &str, pod: &str| jobs.get(&(ns.to_string(), pod.to_string())).cloned();
        assert_eq!(get("research", "llama-worker-3").as_deref(), Some("llama"));
        assert_eq!(
            get("research", "js-workers-0-3-x7k2p").as_deref(),
            Some("js")
        );
        assert_eq!(get("serve", "lws-1-2").as_deref(), Some("lws-1"));
        assert_eq!(get("batch", "train-4-x7k2p").as_deref(), Some("train"));
        assert_eq!(get("db", "sts-2").as_deref(), Some("sts"));
        assert_eq!(
            get("kube-system", "kube-proxy-gpu-node-7"),
            None,
            "a static pod"
        );
        assert_eq!(get("dev", "notebook"), None, "no controller: no job");
        assert!(parse(b"{\"kind\": \"Status\"").is_err());
        assert!(parse(b"{}").expect("empty list").is_empty());
    }

    fn client(url: String, token: &std::path::Path) -> PodsClient {
        PodsClient::new(&KubeletPods {
            url,
            token_file: token.to_path_buf(),
            ca_file: None,
            insecure_skip_verify: false,
        })
        .expect("client")
    }

    #[tokio::test]
    async fn the_kubelet_is_asked_with_the_service_accounts_token() {
        let dir = tempfile::tempdir().expect("tmp");
        let token = dir.path().join("token");
        std::fs::write(&token, "sa-token-123\n").expect("token");
        let (url, auth) = serve(200, POD_LIST);
        let jobs = client(url, &token).fetch().await.expect("pods");
        assert_eq!(jobs.len(), 5);
        assert_eq!(auth.recv().expect("asked"), "Bearer sa-token-123");
        // Refused (no nodes/proxy): one clear line, which says what to grant.
        let (url, _) = serve(403, r#"{"kind":"Status","reason":"Forbidden"}"#);
        let e = client(url, &token).fetch().await.expect_err("refused");
        assert!(e.is_refusal());
        assert!(e.to_string().contains("nodes/proxy"), "{e}");
        assert!(!e.to_string().contains("sa-token-123"));
        // A body that is not a PodList, and no token: errors, not an empty answer.
        let (url, _) = serve(200, "<html>");
        assert!(matches!(
            client(url, &token).fetch().await,
            Err(PodsError::Malformed { .. })
        ));
        let (url, _) = serve(200, POD_LIST);
        assert!(matches!(
            client(url, &dir.path().join("missing")).fetch().await,
            Err(PodsError::Token { .. })
        ));
    }
}
