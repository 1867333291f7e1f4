//! The library the loader would pick: configured file, LD_LIBRARY_PATH, ld.so.cache, the
//! standard directories; broken chains, stale versions, a file that is not NVML.

use std::process::Command;

use super::fixture::*;

#[test]
fn no_library_a_broken_chain_and_a_missing_configured_file_fail() {
    let h = Host::healthy(TWO_H100);
    std::fs::remove_dir_all(h.path("usr")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "fail",
        "no libnvidia-ml.so.1 in the standard directories",
        "install the NVIDIA driver",
    );

    // The link points at a version that is not there (a half-removed driver).
    let h = Host::healthy(TWO_H100);
    h.link(
        &format!("{LIBDIR}/libnvidia-ml.so.1"),
        "libnvidia-ml.so.535.104.05",
    );
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "fail",
        "libnvidia-ml.so.1 → libnvidia-ml.so.535.104.05: broken link",
        "ldconfig",
    );

    let o = h.doctor(
        &h.config("nvml_library = \"/nonexistent/libnvidia-ml.so.1\""),
        &["--format", "json"],
    );
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "fail",
        "the configured nvml_library /nonexistent/libnvidia-ml.so.1 cannot be opened",
        "nvml_library",
    );
    expect(
        &c,
        "nvml init",
        "fail",
        "cannot load /nonexistent/libnvidia-ml.so.1",
        "install the NVIDIA driver",
    );
}

#[test]
fn ld_library_path_wins_and_stale_versions_and_broken_dev_links_warn() {
    let h = Host::healthy(TWO_H100);
    // An older copy first in LD_LIBRARY_PATH (a container image that ships its own).
    let old = h.path("opt/cuda/lib64/libnvidia-ml.so.535.104.05");
    std::fs::create_dir_all(old.parent().expect("parent")).expect("mkdir");
    std::fs::copy(fake_library(), &old).expect("copy");
    h.write("opt/cuda/lib64/gpuwatch-scenario.toml", TWO_H100);
    h.link(
        "opt/cuda/lib64/libnvidia-ml.so.1",
        "libnvidia-ml.so.535.104.05",
    );
    h.link(&format!("{LIBDIR}/libnvidia-ml.so"), "libnvidia-ml.so.2");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["doctor", "--format", "json", "--host-root"])
        .arg(h.dir.path())
        .arg("--config")
        .arg(h.config(""))
        .env("LD_LIBRARY_PATH", "/opt/cuda/lib64")
        .output()
        .expect("doctor");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "ok",
        "opt/cuda/lib64/libnvidia-ml.so.1 → libnvidia-ml.so.535.104.05 (LD_LIBRARY_PATH)",
        "",
    );
    expect(
        &c,
        "nvml library versions",
        "warn",
        "several versions: 535.104.05",
        "remove the stale copies",
    );
    expect(
        &c,
        "nvml library links",
        "warn",
        "libnvidia-ml.so → libnvidia-ml.so.2",
        "ldconfig",
    );
    // The container mismatch: the picked library's version against the module's.
    expect(
        &c,
        "driver versions",
        "fail",
        "kernel module 550.90.07, library file 535.104.05",
        "host driver's libnvidia-ml",
    );
}

/// Debian's layout: the driver's libraries in a directory only `ld.so.cache` knows.
const DEBIAN_DIR: &str = "usr/lib/x86_64-linux-gnu/nvidia/current";

/// Moves the healthy fixture's library chain from the standard directory to `dir`.
fn move_library(h: &Host, dir: &str) {
    std::fs::create_dir_all(h.path(dir)).expect("mkdir");
    for f in [
        "libnvidia-ml.so.550.90.07",
        "libnvidia-ml.so.1",
        "libnvidia-ml.so",
        "gpuwatch-scenario.toml",
    ] {
        std::fs::rename(
            h.path(&format!("{LIBDIR}/{f}")),
            h.path(&format!("{dir}/{f}")),
        )
        .expect("move");
    }
}

#[test]
fn the_library_is_found_through_ld_so_cache_and_missing_without_it() {
    let h = Host::healthy(TWO_H100);
    move_library(&h, DEBIAN_DIR);
    h.ld_cache(&[&format!("/{DEBIAN_DIR}")]);
    let cfg = h.config("");
    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "ok",
        &format!("{DEBIAN_DIR}/libnvidia-ml.so.1 → libnvidia-ml.so.550.90.07 (ld.so.cache)"),
        "",
    );
    expect(&c, "nvml init", "ok", ": 2 GPUs", "");

    // The same tree without its cache: the loader finds nothing.
    std::fs::remove_file(h.path("etc/ld.so.cache")).expect("rm");
    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    expect(
        &json(&o),
        "nvml library",
        "fail",
        "no libnvidia-ml.so.1 in the standard directories (no ",
        "install the NVIDIA driver",
    );
}

#[test]
fn a_stale_ld_so_conf_entry_wins_over_the_installed_driver() {
    // A leftover of a runfile install: /opt/nvidia-535/lib in ld.so.conf.d, searched before
    // the standard directory that holds the installed driver's 550.90.07.
    let h = Host::healthy(TWO_H100);
    let old = "opt/nvidia-535/lib";
    std::fs::create_dir_all(h.path(old)).expect("mkdir");
    std::fs::copy(
        fake_library(),
        h.path(&format!("{old}/libnvidia-ml.so.535.104.05")),
    )
    .expect("copy");
    h.write(&format!("{old}/gpuwatch-scenario.toml"), TWO_H100);
    h.link(
        &format!("{old}/libnvidia-ml.so.1"),
        "libnvidia-ml.so.535.104.05",
    );
    h.ld_cache(&[&format!("/{old}")]);
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "ok",
        &format!("{old}/libnvidia-ml.so.1 → libnvidia-ml.so.535.104.05 (ld.so.cache)"),
        "",
    );
    expect(
        &c,
        "driver versions",
        "fail",
        "kernel module 550.90.07, library file 535.104.05",
        "host driver's libnvidia-ml",
    );
    expect(
        &c,
        "nvml library versions",
        "warn",
        "several versions: 535.104.05",
        "remove the stale copies",
    );
}

#[test]
fn a_file_that_is_not_nvml_fails_init_and_its_version_is_unknown() {
    // A shared object without NVML's symbols (what a wrong file or a pre-v2 library is), as
    // the plain libnvidia-ml.so.1: no version in its name, and NVML does not start.
    let h = Host::healthy(TWO_H100);
    let lib = h.path(&format!("{LIBDIR}/libnvidia-ml.so.1"));
    std::fs::remove_file(&lib).expect("rm");
    std::fs::remove_file(h.path(&format!("{LIBDIR}/libnvidia-ml.so.550.90.07"))).expect("rm");
    let src = h.path("stub.c");
    std::fs::write(&src, "int not_nvml(void) { return 0; }\n").expect("write");
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .expect("run cc (the C compiler Rust links with)");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "nvml init",
        "fail",
        &format!("{LIBDIR}/libnvidia-ml.so.1 lacks nvmlInit_v2"),
        "upgrade the NVIDIA driver, or point `nvml_library`",
    );
    let found = check(&c, "nvml init")["found"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(found.ends_with("lacks nvmlInit_v2"), "{found}");
    expect(
        &c,
        "driver versions",
        "warn",
        "neither the library's file name nor NVML gives the library's version",
        "see `nvml init`",
    );
}
