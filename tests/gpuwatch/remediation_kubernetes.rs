//! The daemon's Kubernetes remediation against an API server built from the real API's
//! contract (no API server runs here): `GET /api/v1/nodes/NAME` answers a Node, `PATCH
//! /api/v1/nodes/NAME/status` takes a strategic merge patch whose conditions merge by `type`,
//! both with the bearer token gpuwatch was given (401 `Status` otherwise), and a wrong
//! content type is 415 as the API server answers. A GPU that falls off the bus (XID 79)
//! makes the daemon set `GpuwatchGPUHealthy=False` with the GPU and the reason, once; when a
//! person sets the condition back, gpuwatch does not set it again for that fault, and the
//! breaker refuses the next fault within the hour; every decision is audited.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::http_support::{Node, wait_for};

const NODE: &str = "gpu-node-1";
const TOKEN: &str = "remediation-token-8c1f";

#[derive(Default)]
struct Api {
    /// The node's conditions (the kubelet's own, and what patches add).
    conditions: Mutex<Vec<Value>>,
    /// Each PATCH body taken.
    patches: Mutex<Vec<Value>>,
    rejected: Mutex<Vec<String>>,
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    (
        code,
        [("content-type", "application/json")],
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": message, "reason": reason, "code": code.as_u16()})
        .to_string(),
    )
        .into_response()
}

async fn handle(
    State(api): State<Arc<Api>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {TOKEN}") {
        api.rejected.lock().unwrap().push(uri.path().to_string());
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    }
    let node = || {
        json!({"kind": "Node", "apiVersion": "v1",
               "metadata": {"name": NODE},
               "status": {"conditions": api.conditions.lock().unwrap().clone()}})
    };
    let path = uri.path();
    if method == Method::GET && path == format!("/api/v1/nodes/{NODE}") {
        return (StatusCode::OK, node().to_string()).into_response();
    }
    if method == Method::PATCH && path == format!("/api/v1/nodes/{NODE}/status") {
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if ct != "application/strategic-merge-patch+json" {
            return status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                &format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct})"
                ),
            );
        }
        let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
            return status(StatusCode::BAD_REQUEST, "BadRequest", "invalid JSON");
        };
        // Strategic merge: conditions merge by `type`.
        let incoming = patch
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        {
            let mut cs = api.conditions.lock().unwrap();
            for c in incoming {
                match cs.iter_mut().find(|x| x["type"] == c["type"]) {
                    Some(x) => *x = c,
                    None => cs.push(c),
                }
            }
        }
        api.patches.lock().unwrap().push(patch);
        return (StatusCode::OK, node().to_string()).into_response();
    }
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{path} not found"),
    )
}

/// Starts the API server on a free loopback port; its base URL.
fn serve(api: Arc<Api>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let app = Router::new().fallback(handle).with_state(api);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = axum::serve(l, app).await;
        });
    });
    format!("http://{addr}")
}

const FALLEN: &str = r#"
[[gpu]]
model = "H100-SXM-80GB"
lost_at = "2s"
[[gpu]]
model = "H100-SXM-80GB"
lost_at = "2s"
[[event]]
gpu = 2
at = "2s"
xid = 79
[[event]]
gpu = 3
at = "2s"
xid = 79
"#;

#[test]
fn a_lost_gpu_sets_the_node_condition_once_and_a_person_clearing_it_is_respected() {
    let api = Arc::new(Api::default());
    api.conditions.lock().unwrap().push(json!({
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status"
    }));
    let url = serve(api.clone());
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    let extra = format!(
        "[remediation]\nenabled = true\ndry_run = false\naction = \"kubernetes\"\n\
         node = \"{NODE}\"\ninterval = \"1s\"\nmax_actions_per_hour = 1\n\
         [remediation.kubernetes]\napi_server = \"{url}\"\ntoken_file = \"{}\"\n",
        token.display()
    );
    let node = Node::with_scenario("gw-k8s", 62, "", &extra, FALLEN);
    let _d = node.start(&[]);

    let patch = wait_for("the condition patched", Duration::from_secs(40), || {
        api.patches.lock().unwrap().first().cloned()
    });
    let c = &patch["status"]["conditions"][0];
    assert_eq!(c["type"], "GpuwatchGPUHealthy");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "GpuFault");
    let msg = c["message"].as_str().unwrap_or("");
    assert!(msg.starts_with("gpuwatch: GPU 2 gpu_lost"), "{msg}");
    assert!(
        c["lastTransitionTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    // The kubelet's own condition is untouched.
    let conds = api.conditions.lock().unwrap().clone();
    assert_eq!(conds.len(), 2, "{conds:?}");
    assert_eq!(conds[0]["type"], "Ready");
    assert!(api.rejected.lock().unwrap().is_empty());

    // Out already: no second patch over a few periods.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(api.patches.lock().unwrap().len(), 1);

    // A person sets it back: gpuwatch records the resume, does not set it again for GPU 2's
    // fault, and the breaker (1 an hour) refuses GPU 3's.
    {
        let mut cs = api.conditions.lock().unwrap();
        if let Some(x) = cs.iter_mut().find(|x| x["type"] == "GpuwatchGPUHealthy") {
            x["status"] = json!("True");
            x["reason"] = json!("ResetByOperator");
        }
    }
    let audit = || -> Vec<Value> {
        let out = node.cli(&[
            "query",
            "--format",
            "json",
            "SELECT result, fault, who, action FROM remediation_audit ORDER BY id",
        ]);
        serde_json::from_str::<Value>(&out)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    let end = std::time::Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows = audit();
        if rows.len() >= 3 {
            break rows;
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for the resume and the breaker audited: {rows:?}\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let results: Vec<&str> = rows.iter().filter_map(|r| r["result"].as_str()).collect();
    assert_eq!(
        results,
        ["done", "resumed_by_person", "refused_breaker"],
        "{rows:?}"
    );
    assert!(rows.iter().all(|r| r["action"] == "node_condition"));
    assert!(
        rows[0]["who"]
            .as_str()
            .is_some_and(|w| w.starts_with("gpuwatch daemon"))
    );
    assert_eq!(rows[0]["fault"], rows[1]["fault"]);
    assert_ne!(rows[2]["fault"], rows[0]["fault"]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        api.patches.lock().unwrap().len(),
        1,
        "nothing patched again"
    );
    let log = node.log();
    assert!(!log.contains(TOKEN), "the token never reaches the log");
}
