//! The deployment files in examples/ pass the checks of the tools that will run them:
//! `systemd-analyze verify` and `security` for the unit, `kubernetes-validate` for the
//! manifests (and the ConfigMap's gpuwatch.toml loads), `promtool` for the scrape config
//! and rules, `amtool` for the Alertmanager route, hadolint for the Dockerfile. (The Grafana
//! dashboard's queries run against a real Prometheus in tests/fleet.rs.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn run(cmd: &mut Command) -> (bool, String) {
    let o = cmd.output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (scripts/test.sh installs the deployment checkers)")
    });
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(repo("examples/systemd/gpuwatch.service")).expect("unit");
    for needed in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "StateDirectory=gpuwatch",
        "DevicePolicy=closed",
        "DeviceAllow=/dev/nvidiactl rw",
        "DeviceAllow=char-nvidia-frontend rw",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
        "Environment=NO_COLOR=1",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(needed), "the unit has {needed:?}");
    }
    // verify checks that ExecStart's binary exists: point it at the one just built.
    let dir = tempfile::tempdir().expect("tmp");
    let copy = dir.path().join("gpuwatch.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/gpuwatch", env!("CARGO_BIN_EXE_gpuwatch")),
    )
    .expect("copy");
    let (ok, out) = run(Command::new("systemd-analyze").arg("verify").arg(&copy));
    assert!(
        ok && !out.contains("gpuwatch.service:"),
        "systemd-analyze verify: {out}"
    );
    let (_, out) = run(Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&copy));
    let level: f64 = out
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for gpuwatch.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {out}"));
    assert!(
        level <= 2.0,
        "exposure {level} (systemd: <= 2 is 'OK'): {out}"
    );
    // The command line it runs is one gpuwatch accepts.
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/gpuwatch "))
        .expect("ExecStart");
    assert_eq!(exec, "run --config /etc/gpuwatch/gpuwatch.toml");
}

/// The YAML documents of a file, as JSON (PyYAML, which kubernetes-validate brings).
fn yaml_docs(path: &Path) -> Vec<serde_json::Value> {
    let (ok, out) = run(Command::new("python3").args([
        "-c",
        "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
    ]).arg(path));
    assert!(ok, "{out}");
    serde_json::from_str(&out).expect("json")
}

#[test]
fn the_kubernetes_manifests_validate_and_mount_what_gpuwatch_reads() {
    let file = repo("examples/kubernetes/gpuwatch.yaml");
    let (ok, out) = run(Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.30.0"])
        .arg(&file));
    assert!(ok, "kubernetes-validate: {out}");
    for kind in ["serviceaccount", "configmap", "daemonset", "service"] {
        assert!(
            out.contains(&format!("passed for resource {kind}/gpuwatch")),
            "{kind}: {out}"
        );
    }
    let docs = yaml_docs(&file);
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("a {kind}"))
            .clone()
    };
    // The CRD has no offline schema: check what the Prometheus Operator reads.
    let sm = of("ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "gpuwatch"
    );
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "http");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(of("Service")["spec"]["ports"][0]["name"], "http");

    let ds = of("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"], "true");
    assert_eq!(pod["hostPID"], true);
    let c = &pod["containers"][0];
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    for path in [
        "/host/proc",
        "/var/lib/kubelet/pod-resources",
        "/var/log/pods",
    ] {
        let m = mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("{path} mounted"));
        assert_eq!(m["readOnly"], true, "{path} read-only");
    }
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");

    // The ConfigMap's config loads, with the paths the DaemonSet mounts.
    let text = of("ConfigMap")["data"]["gpuwatch.toml"]
        .as_str()
        .expect("config")
        .to_string();
    let cfg = gpuwatch::config::Config::parse(&text, Path::new("configmap/gpuwatch.toml"))
        .unwrap_or_else(|e| panic!("the ConfigMap's gpuwatch.toml: {e}"));
    assert_eq!(cfg.processes.proc_root, Path::new("/host/proc"));
    assert!(cfg.http.token.is_some() && !cfg.http.listen.ip().is_loopback());
    assert!(
        cfg.kubernetes
            .pod_resources_socket
            .starts_with("/var/lib/kubelet/pod-resources")
    );
    let data = mounts.iter().find(|m| m["name"] == "data").expect("data");
    assert!(
        cfg.database
            .starts_with(data["mountPath"].as_str().expect("path"))
    );
}

#[test]
fn prometheus_and_alertmanager_configs_pass_their_checkers() {
    let dir = tempfile::tempdir().expect("tmp");
    for f in ["prometheus.yml", "gpuwatch-rules.yml"] {
        std::fs::copy(
            repo(&format!("examples/prometheus/{f}")),
            dir.path().join(f),
        )
        .expect("copy");
    }
    // The token file it names, next to it (promtool checks that it exists).
    std::fs::write(dir.path().join("gpuwatch-token"), "x\n").expect("token");
    let (ok, out) = run(Command::new("promtool")
        .args(["check", "config"])
        .arg(dir.path().join("prometheus.yml")));
    assert!(
        ok && out.contains("SUCCESS: 1 rule files found"),
        "promtool: {out}"
    );
    let (ok, out) = run(Command::new("promtool")
        .args(["check", "rules"])
        .arg(dir.path().join("gpuwatch-rules.yml")));
    assert!(ok, "promtool rules: {out}");
    let (ok, out) = run(Command::new("amtool")
        .args(["check-config"])
        .arg(repo("examples/alertmanager/alertmanager.yml")));
    assert!(ok && out.contains("SUCCESS"), "amtool: {out}");
}

#[test]
fn the_dockerfile_lints_clean_and_the_dashboard_is_grafana_json() {
    let (ok, out) = run(Command::new("hadolint").arg(repo("examples/Dockerfile")));
    assert!(ok && out.trim().is_empty(), "hadolint: {out}");
    let d: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("examples/grafana/gpuwatch-dashboard.json"))
            .expect("dashboard"),
    )
    .expect("JSON");
    assert!(d["panels"].as_array().is_some_and(|p| p.len() >= 10));
    let exprs: Vec<&str> = d["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for wanted in [
        "gpuwatch_training_step",
        "gpuwatch_training_loss",
        "DCGM_FI_DEV_GPU_UTIL",
        "gpuwatch_alert",
        "gpuwatch_outbox_pending_notifications",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(wanted)),
            "a panel of {wanted}"
        );
    }
}
