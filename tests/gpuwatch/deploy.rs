//! The deployment files in examples/ pass the checks of the tools that will run them:
//! `systemd-analyze verify` and `security` for the unit, `kubernetes-validate` for the
//! manifests (and the ConfigMap's gpuwatch.toml loads), `promtool` for the scrape config
//! and rules, `amtool` for the Alertmanager route, hadolint for the Dockerfile. (The Grafana
//! dashboard's queries run against a real Prometheus in `fleet.rs`.)

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

/// The kernel-log drop-in added to the unit still verifies (a unit may repeat `[Service]`;
/// the later assignments win, as a drop-in's do).
#[test]
fn the_kmsg_drop_in_verifies_with_the_unit() {
    let unit = std::fs::read_to_string(repo("examples/systemd/gpuwatch.service")).expect("unit");
    let drop_in = std::fs::read_to_string(repo("examples/systemd/kmsg.conf")).expect("drop-in");
    for needed in [
        "ProtectKernelLogs=no",
        "DeviceAllow=/dev/kmsg r",
        "AmbientCapabilities=CAP_SYSLOG",
    ] {
        assert!(drop_in.contains(needed), "the drop-in has {needed:?}");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let copy = dir.path().join("gpuwatch.service");
    std::fs::write(
        &copy,
        format!("{unit}\n{drop_in}")
            .replace("/usr/local/bin/gpuwatch", env!("CARGO_BIN_EXE_gpuwatch")),
    )
    .expect("copy");
    let (ok, out) = run(Command::new("systemd-analyze").arg("verify").arg(&copy));
    assert!(
        ok && !out.contains("gpuwatch.service:"),
        "systemd-analyze verify: {out}"
    );
}

/// The mode every guide installs the config with: the `install ... -m MODE
/// examples/gpuwatch.toml` lines of docs/DEPLOY.md and the unit's comment.
fn documented_config_modes() -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for doc in [
        "docs/DEPLOY.md",
        "examples/systemd/gpuwatch.service",
        "README.md",
    ] {
        let text = std::fs::read_to_string(repo(doc)).expect(doc);
        for line in text.lines().filter(|l| {
            l.contains("install ")
                && l.contains("examples/gpuwatch.toml /etc/gpuwatch/gpuwatch.toml")
        }) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let mode = words
                .iter()
                .position(|w| *w == "-m")
                .and_then(|i| words.get(i + 1))
                .and_then(|m| u32::from_str_radix(m, 8).ok())
                .unwrap_or_else(|| panic!("{doc}: no -m MODE in {line:?}"));
            found.push((format!("{doc}: {line}"), mode));
        }
    }
    assert!(
        found.len() >= 3,
        "every guide installs the config: {found:?}"
    );
    found
}

/// The systemd unit runs as a `DynamicUser`: neither the config's owner (root) nor in its
/// group. The config installed as the guides say must be readable by such a user: as root,
/// `gpuwatch run --check` runs as uid/gid 65534 (util-linux's `setpriv`, as the dynamic user
/// would) on a root-owned copy installed with the documented mode.
#[test]
fn the_config_installed_as_documented_is_readable_by_the_units_dynamic_user() {
    use std::os::unix::fs::PermissionsExt;
    for (place, mode) in documented_config_modes() {
        assert!(
            mode & 0o004 != 0,
            "{place}: mode {mode:o} hides the config from the unit's DynamicUser"
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            continue; // the mode check above is what a non-root run can check
        }
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let etc = dir.path().join("etc/gpuwatch");
        let cfg = etc.join("gpuwatch.toml");
        let (ok, out) = run(Command::new("install")
            .args(["-D", "-m", &format!("{mode:o}")])
            .arg(repo("examples/gpuwatch.toml"))
            .arg(&cfg));
        assert!(ok, "install: {out}");
        std::fs::set_permissions(
            dir.path().join("etc"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // A hard link the unprivileged user can reach (the build tree may not be).
        let bin = dir.path().join("gpuwatch");
        if std::fs::hard_link(env!("CARGO_BIN_EXE_gpuwatch"), &bin).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_gpuwatch"), &bin).expect("copy the binary");
        }
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let (ok, out) = run(Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(["run", "--check", "--config"])
            .arg(&cfg)
            .env_remove("RUST_LOG"));
        assert!(
            ok && out.contains("configuration OK"),
            "{place}: run --check as the unit's user: {out}"
        );
    }
}

/// Every `docker run` in the guides (their `\`-continued lines joined, `#` comments
/// stripped), with where it is.
fn documented_docker_runs() -> Vec<(String, String)> {
    let mut runs = Vec::new();
    for doc in ["docs/DEPLOY.md", "examples/Dockerfile", "README.md"] {
        let text = std::fs::read_to_string(repo(doc)).expect(doc);
        let mut joined = String::new();
        for line in text.lines() {
            let line = line.trim_start().trim_start_matches('#').trim();
            match line.strip_suffix('\\') {
                Some(head) => joined.push_str(head),
                None => {
                    joined.push_str(line);
                    if joined.contains("docker run ") {
                        runs.push((doc.to_string(), std::mem::take(&mut joined)));
                    }
                    joined.clear();
                }
            }
        }
    }
    runs
}

/// The container guides work as written: NVML names processes by host PID (`--pid=host`, as
/// the DaemonSet's `hostPID: true`); the bundled config binds loopback, so a run that keeps
/// it uses the host's network rather than publishing a port nothing listens on; and the build
/// context leaves `target/` and `.git/` out.
#[test]
fn the_docker_runs_see_host_pids_and_reach_what_they_publish() {
    let bundled = std::fs::read_to_string(repo("examples/gpuwatch.toml")).expect("config");
    let listen = bundled
        .lines()
        .find_map(|l| l.trim().strip_prefix("listen = "))
        .expect("the bundled config's listen");
    assert!(
        listen.contains("127.0.0.1"),
        "the bundled config binds loopback: {listen}"
    );
    let runs = documented_docker_runs();
    assert!(runs.len() >= 2, "{runs:?}");
    for (doc, cmd) in &runs {
        assert!(cmd.contains("--pid=host"), "{doc}: {cmd}");
        let mounts_config = cmd.contains(":/etc/gpuwatch/gpuwatch.toml");
        let publishes = cmd
            .split_whitespace()
            .any(|w| w == "-p" || w.starts_with("--publish"));
        if !mounts_config {
            assert!(
                cmd.contains("--network=host") && !publishes,
                "{doc}: with the bundled config (loopback) only the host's network reaches it: {cmd}"
            );
        }
    }
    assert!(
        runs.iter()
            .any(|(_, c)| c.contains(":/etc/gpuwatch/gpuwatch.toml")
                && c.contains("-p 9835:9835")
                && c.contains("NODE_NAME")),
        "a published run mounts a config and names the host: {runs:?}"
    );
    let ignore = std::fs::read_to_string(repo(".dockerignore")).expect(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for wanted in ["target/", ".git/"] {
        assert!(
            ignored.contains(&wanted),
            ".dockerignore leaves out {wanted}: {ignored:?}"
        );
    }
    for needed in [
        "src",
        "crates",
        "migrations",
        "rules",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
    ] {
        assert!(
            !ignored.iter().any(|p| p.trim_end_matches('/') == needed),
            ".dockerignore keeps {needed}, which the build needs"
        );
    }
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
    for f in [
        "prometheus.yml",
        "gpuwatch-rules.yml",
        "gpuwatch-fleet-rules.yml",
        "gpuwatch-usage-rules.yml",
    ] {
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
        ok && out.contains("SUCCESS: 3 rule files found"),
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
    // A multi-node job's alert and its nodes' hang alerts reach the on-call receiver, grouped
    // by the job (the nodes' after a wait the job's alert can inhibit them in).
    for labels in [
        &[
            "alertname=GpuwatchJobHang",
            "training_job=4242",
            "severity=critical",
        ][..],
        &[
            "alertname=training_hang",
            "training_job=4242",
            "host=n1",
            "severity=critical",
        ][..],
    ] {
        let (ok, out) = run(Command::new("amtool")
            .args(["config", "routes", "test", "--verify.receivers=gpu-oncall"])
            .arg(format!(
                "--config.file={}",
                repo("examples/alertmanager/alertmanager.yml").display()
            ))
            .args(labels));
        assert!(ok, "amtool routes {labels:?}: {out}");
    }
}

/// Debian's vmalert loads `rules` unchanged (`-dryRun`: no error, fatal or warning).
fn vmalert_loads(rules: &std::path::Path) {
    let (ok, out) = run(Command::new("vmalert")
        .arg("-dryRun")
        .arg(format!("-rule={}", rules.display())));
    let bad: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("\terror\t") || l.contains("\tfatal\t") || l.contains("\twarn\t"))
        .collect();
    assert!(ok && bad.is_empty(), "vmalert -dryRun: {out}");
}

/// The usage recording rules: their promtool unit tests (two nodes summed, a restart's
/// counter reset), and vmalert loads them unchanged.
#[test]
fn the_usage_rules_pass_their_unit_tests_and_load_in_vmalert() {
    let rules = repo("examples/prometheus/gpuwatch-usage-rules.yml");
    let (ok, out) = run(Command::new("promtool")
        .args(["test", "rules"])
        .arg(repo("examples/prometheus/gpuwatch-usage-rules.test.yml")));
    assert!(ok && out.contains("SUCCESS"), "promtool test rules: {out}");
    vmalert_loads(&rules);
}

/// The fleet's rules: their promtool unit tests (every alert and every quiet case, the
/// logic's real tests), and Debian's vmalert loads the same file unchanged.
#[test]
fn the_fleet_rules_pass_their_unit_tests_and_load_in_vmalert() {
    let rules = repo("examples/prometheus/gpuwatch-fleet-rules.yml");
    let (ok, out) = run(Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules));
    assert!(
        ok && out.contains("SUCCESS: 2 rules found"),
        "promtool: {out}"
    );
    let (ok, out) = run(Command::new("promtool")
        .args(["test", "rules"])
        .arg(repo("examples/prometheus/gpuwatch-fleet-rules.test.yml")));
    assert!(ok && out.contains("SUCCESS"), "promtool test rules: {out}");
    vmalert_loads(&rules);
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
        "gpuwatch_gpu_idle_held_seconds_total",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(wanted)),
            "a panel of {wanted}"
        );
    }
}

/// The opt-in remediation manifests: valid, and the least RBAC the node condition needs
/// (`get` nodes, `patch` nodes/status) for gpuwatch's own ServiceAccount, with its token.
#[test]
fn the_remediation_manifests_validate_and_grant_only_the_node_condition() {
    let file = repo("examples/kubernetes/gpuwatch-remediation.yaml");
    let (ok, out) = run(Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.30.0"])
        .arg(&file));
    assert!(ok, "kubernetes-validate: {out}");
    let docs = yaml_docs(&file);
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("a {kind}"))
            .clone()
    };
    let role = of("ClusterRole");
    let rules = role["rules"].as_array().expect("rules");
    let grants: Vec<(String, String)> = rules
        .iter()
        .flat_map(|r| {
            let res = r["resources"].as_array().cloned().unwrap_or_default();
            let verbs = r["verbs"].as_array().cloned().unwrap_or_default();
            res.into_iter().flat_map(move |x| {
                verbs.clone().into_iter().map(move |v| {
                    (
                        x.as_str().unwrap_or("").to_string(),
                        v.as_str().unwrap_or("").to_string(),
                    )
                })
            })
        })
        .collect();
    assert_eq!(
        grants,
        [
            ("nodes".to_string(), "get".to_string()),
            ("nodes/status".to_string(), "patch".to_string())
        ]
    );
    let binding = of("ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], "gpuwatch-remediation");
    let secret = of("Secret");
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "gpuwatch-remediation"
    );
    assert_eq!(of("ServiceAccount")["automountServiceAccountToken"], false);
}
