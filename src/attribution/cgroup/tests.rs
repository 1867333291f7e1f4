//! The path shapes of real runtimes and schedulers, each with the exact attribution.

use super::*;

const ID: &str = "3f6b0f1b0b2b0cd6a3bd0f7f4dbf51e9e3f15b5b4c3a3e7c0e5d8b9a1c2d3e4f";
const ID2: &str = "9a8b7c6d5e4f30211a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081";
const UID: &str = "7c1e6a4e-2c4b-4d3e-9f1a-0b2c3d4e5f60";

struct Want {
    runtime: Option<Runtime>,
    container: Option<&'static str>,
    pod: Option<&'static str>,
    job: Option<u64>,
    step: Option<&'static str>,
    unit: Option<&'static str>,
}

const NONE: Want = Want {
    runtime: None,
    container: None,
    pod: None,
    job: None,
    step: None,
    unit: None,
};

fn check(name: &str, text: &str, want: Want) {
    let got = parse(text).unwrap_or_else(|| panic!("{name}: no cgroup line in {text:?}"));
    assert_eq!(got.runtime, want.runtime, "{name}: runtime");
    assert_eq!(
        got.container_id.as_deref(),
        want.container,
        "{name}: container id"
    );
    assert_eq!(got.pod_uid.as_deref(), want.pod, "{name}: pod uid");
    assert_eq!(got.slurm_job, want.job, "{name}: slurm job");
    assert_eq!(got.slurm_step.as_deref(), want.step, "{name}: slurm step");
    assert_eq!(got.unit.as_deref(), want.unit, "{name}: unit");
}

fn v1(path: &str) -> String {
    // A cgroup v1 host: every controller names the same path, systemd's named hierarchy too.
    [
        "12:pids:PATH",
        "11:memory:PATH",
        "10:devices:PATH",
        "9:cpu,cpuacct:PATH",
        "1:name=systemd:PATH",
        "0::/",
    ]
    .map(|l| l.replace("PATH", path))
    .join("\n")
}

#[test]
fn docker() {
    let w = || Want {
        runtime: Some(Runtime::Docker),
        container: Some(ID),
        ..NONE
    };
    check("docker cgroupfs v1", &v1(&format!("/docker/{ID}")), w());
    check(
        "docker systemd v2",
        &format!("0::/system.slice/docker-{ID}.scope\n"),
        w(),
    );
    check(
        "docker in docker: the innermost",
        &format!("0::/docker/{ID2}/docker/{ID}"),
        w(),
    );
}

#[test]
fn kubernetes() {
    let u = UID.replace('-', "_");
    check(
        "containerd, systemd driver, burstable",
        &format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"
        ),
        Want {
            runtime: Some(Runtime::Containerd),
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "containerd, systemd driver, guaranteed (no QoS slice)",
        &format!("0::/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope"),
        Want {
            runtime: Some(Runtime::Containerd),
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "cgroupfs driver v1, burstable: no runtime in the path",
        &v1(&format!("/kubepods/burstable/pod{UID}/{ID}")),
        Want {
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "cgroupfs driver v2, guaranteed",
        &format!("0::/kubepods/pod{UID}/{ID}"),
        Want {
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "CRI-O, besteffort",
        &format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"
        ),
        Want {
            runtime: Some(Runtime::CriO),
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "CRI-O's conmon is not the container",
        &format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-conmon-{ID}.scope"
        ),
        Want {
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "kind: a kubelet inside a container",
        &format!(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope"
        ),
        Want {
            runtime: Some(Runtime::Containerd),
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
    check(
        "docker runtime under the systemd driver (dockershim)",
        &format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/docker-{ID}.scope"
        ),
        Want {
            runtime: Some(Runtime::Docker),
            container: Some(ID),
            pod: Some(UID),
            ..NONE
        },
    );
}

#[test]
fn podman() {
    let w = || Want {
        runtime: Some(Runtime::Podman),
        container: Some(ID),
        ..NONE
    };
    check(
        "rootful",
        &format!("0::/machine.slice/libpod-{ID}.scope"),
        w(),
    );
    check(
        "rootless, the container's own sub-cgroup",
        &format!(
            "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"
        ),
        w(),
    );
    let conmon = parse(&format!("0::/machine.slice/libpod-conmon-{ID}.scope")).expect("line");
    assert_eq!(conmon.container_id, None, "conmon is not the container");
    assert_eq!(conmon.unit, Some(format!("libpod-conmon-{ID}.scope")));
}

#[test]
fn slurm() {
    check(
        "v1",
        &v1("/slurm/uid_1000/job_4242/step_0/task_0"),
        Want {
            job: Some(4242),
            step: Some("0"),
            ..NONE
        },
    );
    check(
        "v1, several slurmd per node",
        &v1("/slurm_node07/uid_1000/job_17/step_batch/task_0"),
        Want {
            job: Some(17),
            step: Some("batch"),
            ..NONE
        },
    );
    check(
        "v2",
        "0::/system.slice/slurmstepd.scope/job_4242/step_3/user/task_0\n",
        Want {
            job: Some(4242),
            step: Some("3"),
            ..NONE
        },
    );
    check(
        "v2, the extern step",
        "0::/system.slice/slurmstepd.scope/job_9/step_extern/user/task_special",
        Want {
            job: Some(9),
            step: Some("extern"),
            ..NONE
        },
    );
    check(
        "v2, the job's own cgroup (no step yet)",
        "0::/system.slice/slurmstepd.scope/job_9",
        Want {
            job: Some(9),
            ..NONE
        },
    );
    check(
        "a job_N component outside Slurm is not a job",
        "0::/system.slice/job_12.service",
        Want {
            unit: Some("job_12.service"),
            ..NONE
        },
    );
}

#[test]
fn hosts_processes() {
    check(
        "a systemd service",
        "0::/system.slice/jupyter.service",
        Want {
            unit: Some("jupyter.service"),
            ..NONE
        },
    );
    check(
        "a login session",
        &v1("/user.slice/user-1000.slice/session-3.scope"),
        Want {
            unit: Some("session-3.scope"),
            ..NONE
        },
    );
    check("the root cgroup (or a cgroup namespace)", "0::/\n", NONE);
}

#[test]
fn hybrid_v1_and_v2_pick_the_line_that_says_most() {
    let text = format!(
        "12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/system.slice/containerd.service\n"
    );
    check(
        "hybrid",
        &text,
        Want {
            runtime: Some(Runtime::Docker),
            container: Some(ID),
            ..NONE
        },
    );
}

#[test]
fn garbage_is_no_attribution() {
    for text in [
        "",
        "\n\n",
        "not a cgroup file",
        "x:y:/docker/abc",
        "12:memory:relative/path",
    ] {
        assert_eq!(parse(text), None, "{text:?}");
    }
    // Well-formed lines with ids that are not a runtime's 64-hex id: no container.
    for path in [
        "/docker/abc123",
        "/system.slice/docker-XYZ.scope",
        &format!("/system.slice/docker-{}.scope", &ID[..63]),
        &format!("/system.slice/docker-{}.scope", ID.to_uppercase()),
        "/kubepods/burstable/podnot-a-uid/abc",
    ] {
        let c = parse(&format!("0::{path}")).expect("a cgroup line");
        assert_eq!(c.container_id, None, "{path}");
        assert_eq!(c.pod_uid, None, "{path}");
    }
}
