//! Pods on alerts, end to end: `gpuwatch run` on the simulated library with a kubelet (a
//! pod-resources server on a unix socket) that allocated each GPU to a pod. The Slack message
//! names the pod; a silence on one namespace (`silence add --match namespace=research`) keeps
//! that pod's GPU out of Slack while the other pod's alert goes out; `status` shows the pods.

use std::time::Duration;

use gpuwatch::attribution::kubelet::server;

use crate::attribution_support;
use crate::notify_support::daemon_rig::{slack_toml, tempdir_rig, wait_for};
use crate::notify_support::slack_server::SlackServer;

/// The rig's rule, held for a few seconds (the kubelet's first answer comes after the first
/// tick: the sampler never waits for it).
const RULES: &str = r#"
[[rule]]
name = "busy"
severity = "warning"
condition = "util_gpu > 50"
for = "3s"
summary = "GPU {gpu} busy"
"#;

#[test]
fn slack_names_the_pod_and_a_namespace_silence_keeps_its_gpu_quiet() {
    let slack = SlackServer::start();
    let kube_dir = tempfile::tempdir().expect("tempdir");
    let sock = kube_dir.path().join("kubelet.sock");
    let list = server::PodList::default();
    list.set(attribution_support::two_pods());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = rt.spawn({
        let (sock, list) = (sock.clone(), list.clone());
        async move {
            server::serve(&sock, list, async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    wait_for("socket", Duration::from_secs(10), || {
        sock.exists().then_some(())
    });

    let rig = tempdir_rig(3600, |d| {
        format!(
            "{}\n[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n",
            slack_toml(d, &slack, ""),
            sock.display()
        )
    });
    std::fs::write(rig.path("r.toml"), RULES).expect("rules");
    let (ok, out) = rig.cli(&[
        "silence",
        "add",
        "--match",
        "namespace=research",
        "--for",
        "2h",
        "--comment",
        "research is rebalancing",
    ]);
    assert!(ok, "{out}");
    let mut d = rig.start("run.log", &[]);

    let got = slack.wait_for(1, Duration::from_secs(30));
    let text = got[0].text();
    assert!(text.contains("GPU 1 busy"), "{text}");
    assert!(
        text.contains("prod-eval/eval-3"),
        "the message names the pod: {text}"
    );
    assert!(
        !text.contains("GPU 0 busy") && !text.contains("llm-ft-7"),
        "the research pod's GPU is silenced: {text}"
    );
    // Slack's blocks carry the pod too, not only the fallback text.
    assert!(got[0].body.contains("eval-3"), "{}", got[0].body);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(slack.received().len(), 1, "GPU 0 stays silenced");

    let (ok, json) = rig.cli(&["status", "--format", "json"]);
    assert!(ok, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("status json");
    assert_eq!(v["gpus"][0]["pod"], "llm-ft-7");
    assert_eq!(v["gpus"][0]["namespace"], "research");
    assert_eq!(v["gpus"][1]["pod"], "eval-3");
    assert_eq!(v["notify"]["silences_active"], 1);
    let (ok, alerts) = rig.cli(&["alerts", "--format", "json"]);
    assert!(ok, "{alerts}");
    let a: serde_json::Value = serde_json::from_str(&alerts).expect("alerts json");
    let labels_of = |gpu: u64| {
        a.as_array()
            .into_iter()
            .flatten()
            .find(|x| x["gpu_index"] == gpu)
            .map(|x| x["labels"].clone())
            .unwrap_or_else(|| panic!("no alert on GPU {gpu}: {a}"))
    };
    assert_eq!(labels_of(0)["namespace"], "research", "{a}");
    assert_eq!(labels_of(1)["pod"], "eval-3", "{a}");

    assert!(d.sigterm().success());
    let (_, status) = rig.cli(&["status"]);
    assert!(status.contains("1 silenced"), "{status}");
    let _ = stop_tx.send(());
    rt.block_on(serving).expect("join").expect("served");
}
