//! Kubernetes: the node condition `GpuwatchGPUHealthy`, read from `GET /api/v1/nodes/NAME`
//! and set to `False` with the GPU and the reason by `PATCH /api/v1/nodes/NAME/status` (a
//! strategic merge patch: conditions merge by `type`, the node's other conditions stay), for
//! the cluster's own remediation (a node-problem controller, a descheduler, NVSentinel) to
//! act on. The one place gpuwatch calls the API server: its own token (RBAC: `get` on
//! `nodes`, `patch` on `nodes/status`), never the kubelet's.
//!
//! Invariants: the token is read from its file at each call, sent only as a bearer header to
//! the configured server, never logged; redirects are not followed (`outbound`); every call
//! ends within 15 s; a condition `False` is out of service, `True`, `Unknown` or absent is in
//! service.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Backend, Fault, NodeState};
use crate::config::remediation::KubernetesApi;

/// The condition's type.
pub const CONDITION: &str = "GpuwatchGPUHealthy";
const TIMEOUT: Duration = Duration::from_secs(15);

pub struct Kubernetes {
    pub api: KubernetesApi,
}

impl Kubernetes {
    fn client(&self) -> Result<(reqwest::Client, String), String> {
        let token = std::fs::read_to_string(&self.api.token_file)
            .map_err(|e| format!("token file {}: {e}", self.api.token_file.display()))?;
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(format!(
                "token file {} is empty",
                self.api.token_file.display()
            ));
        }
        let mut b = crate::outbound::builder(TIMEOUT);
        if let Some(ca) = self.api.ca_file.as_ref().filter(|p| p.exists()) {
            b = crate::outbound::add_ca_file(b, ca)?;
        }
        let client = b.build().map_err(|e| format!("HTTP client: {e}"))?;
        Ok((client, token))
    }

    fn call(
        &self,
        f: impl AsyncFnOnce(reqwest::Client, String) -> Result<Value, String>,
    ) -> Result<Value, String> {
        let (client, token) = self.client()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        rt.block_on(f(client, token))
    }
}

/// The answer's JSON, or the API server's error (its `message`) with the status.
async fn answer(r: Result<reqwest::Response, reqwest::Error>) -> Result<Value, String> {
    let r = r.map_err(|e| format!("API server: {}", without_url(&e)))?;
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Ok(body)
    } else {
        let msg = body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        Err(format!("API server answered {status}: {msg}"))
    }
}

fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "");
    }
    s
}

/// The node's condition, from a Node object.
pub fn state_of(node: &Value) -> NodeState {
    let cond = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(CONDITION))
        });
    match cond {
        Some(c) if c.get("status").and_then(Value::as_str) == Some("False") => {
            NodeState::Out(c.get("message").and_then(Value::as_str).map(str::to_string))
        }
        _ => NodeState::InService,
    }
}

/// The strategic merge patch that sets the condition to False.
pub fn patch(fault: &Fault, now_rfc3339: &str) -> Value {
    json!({
        "status": {
            "conditions": [{
                "type": CONDITION,
                "status": "False",
                "reason": "GpuFault",
                "message": fault.reason(),
                "lastHeartbeatTime": now_rfc3339,
                "lastTransitionTime": now_rfc3339,
            }]
        }
    })
}

impl Backend for Kubernetes {
    fn action(&self) -> &'static str {
        "node_condition"
    }

    fn state(&self, node: &str) -> Result<NodeState, String> {
        let url = format!("{}/api/v1/nodes/{node}", self.api.api_server);
        let v =
            self.call(async |c, token| answer(c.get(&url).bearer_auth(token).send().await).await)?;
        Ok(state_of(&v))
    }

    fn take_out(&self, node: &str, fault: &Fault) -> Result<(), String> {
        let url = format!("{}/api/v1/nodes/{node}/status", self.api.api_server);
        let now = crate::format::rfc3339_ms(crate::clock::now_ms());
        let body = patch(fault, &now).to_string();
        self.call(async |c, token| {
            answer(
                c.patch(&url)
                    .bearer_auth(token)
                    .header("Content-Type", "application/strategic-merge-patch+json")
                    .body(body)
                    .send()
                    .await,
            )
            .await
        })
        .map(|_| ())
    }
}
