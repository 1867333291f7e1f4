//! The kernel module, the device nodes and the GPU nodes against NVML's GPUs.

use super::fixture::*;

#[test]
fn a_healthy_host_is_all_ok_in_order_and_exits_0() {
    let h = Host::healthy(TWO_H100);
    let db = h.path("var/g.db");
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
    drop(gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("h")).expect("db"));
    let cfg = h.config("");
    let o = h.doctor(&cfg, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("ok    kernel module: nvidia 550.90.07 loaded (NVRM version: NVIDIA UNIX x86_64 Kernel Module 550.90.07"), "{t}");
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.get(6..).and_then(|r| r.split(':').next()))
        .collect();
    let order = [
        "kernel module",
        "nvidia_uvm",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidiaN",
        "nvml library",
        "nvml library links",
        "nvml library versions",
        "driver versions",
        "nvml init",
        "gpu0",
        "gpu0 persistence mode",
        "gpu1",
        "gpu1 PCIe link",
        "gpu0 fabric",
        "gpu1 fabric",
        "fabric manager",
        "config",
        "database",
        "receivers",
    ];
    let mut at = 0;
    for n in order {
        at += names[at..]
            .iter()
            .position(|x| *x == n)
            .unwrap_or_else(|| panic!("{n} out of order in {t}"));
    }
    assert!(t.ends_with("0 warnings, 0 failures\n"), "{t}");
    assert!(
        t.contains("ok    gpu0 persistence mode: on; nvidia-persistenced runs (pid 4242)"),
        "{t}"
    );
    assert!(
        t.contains(
            "ok    fabric manager: nv-fabricmanager runs (pid 4343); 2 GPU(s) in the NVLink fabric"
        ),
        "{t}"
    );

    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let checks = json(&o);
    assert!(
        checks.iter().all(|c| c["status"] == "ok" && c["fix"] == ""),
        "{checks:#?}"
    );
    expect(
        &checks,
        "nvml library",
        "ok",
        &format!("{LIBDIR}/libnvidia-ml.so.1 → libnvidia-ml.so.550.90.07 (standard dirs)"),
        "",
    );
    expect(
        &checks,
        "driver versions",
        "ok",
        "kernel module 550.90.07, library file 550.90.07, NVML reports 550.90.07",
        "",
    );
    expect(&checks, "nvml init", "ok", "(driver 550.90.07)", "");
    expect(&checks, "nvml init", "ok", ": 2 GPUs", "");
    expect(
        &checks,
        "/dev/nvidiaN",
        "ok",
        "2 GPU nodes (nvidia0, nvidia1)",
        "",
    );
    expect(
        &checks,
        "gpu1 memory repair",
        "ok",
        "0 correctable, 0 uncorrectable rows remapped",
        "",
    );
    expect(&checks, "database", "ok", "quick_check ok", "");
}

#[test]
fn a_missing_module_and_missing_or_wrong_nodes_fail_with_the_fix() {
    let h = Host::healthy(TWO_H100);
    h.write("proc/modules", "video 73728 0 - Live 0x0000000000000000\n");
    std::fs::remove_file(h.path("dev/nvidiactl")).expect("rm");
    std::fs::remove_file(h.path("dev/nvidia-uvm")).expect("rm");
    std::fs::remove_file(h.path("dev/nvidia1")).expect("rm");
    h.write("dev/nvidia1", "");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "kernel module",
        "fail",
        "nvidia is not in",
        "modprobe nvidia",
    );
    expect(
        &c,
        "nvidia_uvm",
        "warn",
        "not loaded",
        "modprobe nvidia-uvm",
    );
    expect(
        &c,
        "/dev/nvidiactl",
        "fail",
        "does not exist",
        "nvidia-modprobe",
    );
    expect(
        &c,
        "/dev/nvidia-uvm",
        "warn",
        "does not exist",
        "nvidia-modprobe -u",
    );
    expect(
        &c,
        "/dev/nvidiaN",
        "fail",
        "nvidia1 is a regular file, not a character device",
        "removed first",
    );

    // No GPU nodes at all, and no version files: the versions cannot be compared.
    let h = Host::healthy(TWO_H100);
    for n in ["nvidia0", "nvidia1"] {
        std::fs::remove_file(h.path(&format!("dev/{n}"))).expect("rm");
    }
    std::fs::remove_file(h.path("sys/module/nvidia/version")).expect("rm");
    std::fs::remove_file(h.path("proc/driver/nvidia/version")).expect("rm");
    let o = h.doctor(&h.config(""), &[]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(
        t.contains("FAIL  /dev/nvidiaN: no /dev/nvidia0, /dev/nvidia1, ... in"),
        "{t}"
    );
    assert!(
        t.contains("warn  kernel module: nvidia loaded, but neither"),
        "{t}"
    );
    assert!(
        t.contains("warn  driver versions: kernel module unknown"),
        "{t}"
    );
}

#[test]
fn sys_and_nvrm_versions_that_disagree_fail_and_unreadable_proc_warns() {
    // /sys says the module is 550.90.07, /proc/driver/nvidia/version says 550.54.15.
    let h = Host::healthy(TWO_H100);
    h.write(
        "proc/driver/nvidia/version",
        &NVRM.replace("550.90.07", "550.54.15"),
    );
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "kernel module",
        "fail",
        "/sys/module/nvidia/version says 550.90.07 and /proc/driver/nvidia/version says 550.54.15",
        "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia",
    );

    // No /proc/modules (the host's /proc not mounted): both module checks cannot tell.
    let h = Host::healthy(TWO_H100);
    std::fs::remove_file(h.path("proc/modules")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "kernel module",
        "warn",
        "cannot tell whether the nvidia module is loaded",
        "mount the host's /proc",
    );
    expect(
        &c,
        "nvidia_uvm",
        "warn",
        "unknown whether nvidia_uvm is loaded",
        "mount the host's /proc",
    );
}

#[test]
fn nodes_the_user_may_not_open_fail_with_the_permission_fix() {
    let h = Host::healthy(&TWO_H100.replace(
        "name = \"doctor\"",
        // What the real library answers then: it cannot open the nodes either.
        "name = \"doctor\"\ninit_error = \"NO_PERMISSION\"",
    ));
    h.restricted_node("dev/nvidiactl", NVIDIACTL_MINOR);
    h.restricted_node("dev/nvidia0", 0);
    h.restricted_node("dev/nvidia1", 1);
    let o = h.doctor_unprivileged(&h.config(""));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "/dev/nvidiactl",
        "fail",
        "is not readable and writable by uid",
        "member of the node's group",
    );
    expect(&c, "/dev/nvidiaN", "fail", "nvidia1", "NVreg_DeviceFileGID");
    if root() {
        expect(
            &c,
            "/dev/nvidiactl",
            "fail",
            "(character device 195:255, mode 660, owner 0:0) is not readable and writable by uid 65534 (gid 65534)",
            "",
        );
    }
    // The node that is open to everyone is fine, and NVML says the same as the nodes.
    expect(&c, "/dev/nvidia-uvm", "ok", "read-write", "");
    expect(&c, "nvml init", "fail", "NO_PERMISSION", "/dev/nvidia*");
}

#[test]
fn gpu_nodes_are_matched_to_nvmls_gpus_by_minor_number() {
    // Two GPUs, one node: gpu1 cannot be opened by CUDA programs.
    let h = Host::healthy(TWO_H100);
    std::fs::remove_file(h.path("dev/nvidia1")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(&c, "/dev/nvidiaN", "ok", "1 GPU node (nvidia0)", "");
    expect(
        &c,
        "/dev/nvidiaN vs NVML",
        "fail",
        "gpu1 (minor number 1) has no /dev/nvidia1",
        "nvidia-modprobe -c N",
    );

    // A node for a GPU NVML does not list (one that fell off the bus, or a stale node).
    let h = Host::healthy(TWO_H100);
    h.link("dev/nvidia2", "/dev/null");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "/dev/nvidiaN vs NVML",
        "warn",
        "nvidia2 for no GPU NVML lists (2 GPUs)",
        "nvidia-smi -L",
    );

    // Matched: ok, and named in order right after NVML's init.
    let h = Host::healthy(TWO_H100);
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    let c = json(&o);
    expect(
        &c,
        "/dev/nvidiaN vs NVML",
        "ok",
        "2 nodes for NVML's 2 GPUs (gpu0 → nvidia0, gpu1 → nvidia1)",
        "",
    );
    let names: Vec<&str> = c.iter().filter_map(|c| c["name"].as_str()).collect();
    let at = |n: &str| names.iter().position(|x| *x == n).expect(n);
    assert_eq!(at("/dev/nvidiaN vs NVML"), at("nvml init") + 1, "{names:?}");

    // A minor number NVML will not give: cannot tell, and no verdict on extra nodes.
    let h = Host::healthy(&format!(
        "{TWO_H100}[[fault]]\ngpu = 1\nsymbol = \"nvmlDeviceGetMinorNumber\"\nerror = \"UNKNOWN\"\n"
    ));
    h.link("dev/nvidia2", "/dev/null");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    expect(
        &json(&o),
        "/dev/nvidiaN vs NVML",
        "warn",
        "cannot tell: gpu1's minor number: UNKNOWN",
        "run the doctor again",
    );
}

#[test]
fn a_dev_that_cannot_be_listed_warns() {
    let h = Host::healthy(TWO_H100);
    std::fs::remove_dir_all(h.path("dev")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "/dev/nvidiaN",
        "warn",
        "cannot list",
        "mount the host's /dev",
    );
    assert!(
        !c.iter().any(|c| c["name"] == "/dev/nvidiaN vs NVML"),
        "no comparison without /dev: {c:#?}"
    );
}
