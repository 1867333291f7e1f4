//! A node's attribution sources for a scenario's processes, for `benches/attribution.sh`:
//! a host `/proc` (for `[processes] proc_root`) with each process's `stat`, `comm`, `status`
//! and `cmdline`, and — with `on` — its `cgroup` (a containerd pod of the systemd driver,
//! one pod per GPU), the pods' `/var/log/pods` directories, and a kubelet serving the
//! pod-resources API on `DIR/kubelet.sock` (until killed) that allocates GPU i to pod
//! `bench/train-i`.
//!
//!   cargo run --release --example attribution_fixture -- SCENARIO DIR on|off
//!
//! With `off` the same processes exist without cgroup files (their placement is unknown) and
//! no kubelet runs: the daemon resolves them exactly as with `on`, minus attribution.

use std::path::Path;

use anyhow::{Context, bail};
use gpuwatch::attribution::kubelet::{proto, server};

fn pod_uid(gpu: usize) -> String {
    format!("7c1e6a4e-2c4b-4d3e-9f1a-{gpu:012x}")
}

fn write_proc(root: &Path, scenario: &gpuwatch_sim::Scenario, cgroups: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join("stat"), "cpu 1 2 3\nbtime 1700000000\n")?;
    for (k, p) in scenario.processes().iter().enumerate() {
        let d = root.join(p.pid.to_string());
        std::fs::create_dir_all(&d)?;
        let start_ticks = 1000 + k as u64;
        let comm: String = p.name.chars().take(15).collect();
        let fields = format!(
            "S 1 {0} {0} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 0 0",
            p.pid
        );
        std::fs::write(d.join("stat"), format!("{} ({comm}) {fields}", p.pid))?;
        std::fs::write(d.join("comm"), format!("{comm}\n"))?;
        std::fs::write(
            d.join("status"),
            format!("Name:\t{comm}\nUid:\t1000\t1000\t1000\t1000\n"),
        )?;
        std::fs::write(d.join("cmdline"), p.cmdline.replace(' ', "\0") + "\0")?;
        if cgroups {
            let gpu = p.gpus.first().copied().unwrap_or(0);
            let uid = pod_uid(gpu).replace('-', "_");
            let id = format!("{:064x}", 0xc0ffee_u64 + k as u64);
            std::fs::write(
                d.join("cgroup"),
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/cri-containerd-{id}.scope\n"
                ),
            )?;
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [scenario, dir, mode] = args.as_slice() else {
        bail!("usage: attribution_fixture SCENARIO DIR on|off");
    };
    let on = match mode.as_str() {
        "on" => true,
        "off" => false,
        other => bail!("mode `{other}`: expected on or off"),
    };
    let scenario = gpuwatch_sim::Scenario::from_path(Path::new(scenario))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = Path::new(dir);
    write_proc(&dir.join("proc"), &scenario, on).context("writing the proc fixture")?;
    if !on {
        return Ok(());
    }
    let gpus = scenario.gpu_count();
    for g in 0..gpus {
        std::fs::create_dir_all(
            dir.join("pods")
                .join(format!("bench_train-{g}_{}", pod_uid(g)))
                .join("trainer"),
        )?;
    }
    let pods = server::PodList::default();
    pods.set(proto::ListPodResourcesResponse {
        pod_resources: (0..gpus)
            .map(|g| proto::PodResources {
                name: format!("train-{g}"),
                namespace: "bench".into(),
                containers: vec![proto::ContainerResources {
                    name: "trainer".into(),
                    devices: vec![proto::ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec![scenario.gpu(g).uuid.clone()],
                    }],
                }],
            })
            .collect(),
    });
    let sock = dir.join("kubelet.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(server::serve(&sock, pods, std::future::pending::<()>()))?;
    Ok(())
}
