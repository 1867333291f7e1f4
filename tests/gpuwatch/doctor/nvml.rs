//! NVML init and each GPU's checks, with errors and modes from the simulated library.

use std::process::Command;

use super::fixture::*;

#[test]
fn nvml_init_errors_fail_with_the_tables_cause_and_fix() {
    let cases = [
        (
            "LIB_RM_VERSION_MISMATCH",
            "different versions",
            "reboot or reload",
        ),
        (
            "DRIVER_NOT_LOADED",
            "kernel driver is not loaded",
            "modprobe nvidia",
        ),
        (
            "NO_PERMISSION",
            "no permission to open the NVIDIA devices",
            "video",
        ),
    ];
    for (code, cause, fix) in cases {
        let h = Host::healthy(&format!(
            "[scenario]\nname = \"x\"\ninit_error = \"{code}\"\n[[gpu]]\nmodel = \"T4\"\n"
        ));
        let o = h.doctor(&h.config(""), &["--format", "json"]);
        assert_eq!(o.status.code(), Some(2), "{code}");
        let c = json(&o);
        expect(&c, "nvml init", "fail", &format!("nvmlInit: {code}: "), fix);
        expect(&c, "nvml init", "fail", cause, "");
        if code == "LIB_RM_VERSION_MISMATCH" {
            expect(
                &c,
                "driver versions",
                "fail",
                "nvmlInit answered LIB_RM_VERSION_MISMATCH",
                "container",
            );
        }
        assert!(
            !c.iter().any(|c| c["name"] == "gpu0"),
            "{code}: no GPU read after a failed init"
        );
        // `run` words the same failure from the same table: the doctor's fix, verbatim.
        let lib = h.path(&format!("{LIBDIR}/libnvidia-ml.so.1"));
        let run = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .args(["run", "--nvml-library"])
            .arg(&lib)
            .arg("--db")
            .arg(h.path("var/run.db"))
            .output()
            .expect("run");
        assert_eq!(run.status.code(), Some(3), "{code}");
        let stderr = String::from_utf8_lossy(&run.stderr);
        let doctor_fix = check(&c, "nvml init")["fix"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            stderr.contains(&doctor_fix) && stderr.contains(cause),
            "{code}: run said {stderr:?}, the doctor's fix is {doctor_fix:?}"
        );
    }
}

#[test]
fn lost_reset_power_and_timeout_errors_fail_per_gpu_and_the_rest_is_read() {
    let cases = [
        ("*", "GPU_IS_LOST", "gpu1", "fallen off the bus", "Xid 79"),
        (
            "nvmlDeviceGetPersistenceMode",
            "RESET_REQUIRED",
            "gpu1 persistence mode",
            "needs a reset",
            "nvidia-smi -r",
        ),
        (
            "nvmlDeviceGetName",
            "INSUFFICIENT_POWER",
            "gpu1",
            "power cables",
            "power supply",
        ),
        (
            "nvmlDeviceGetComputeMode",
            "TIMEOUT",
            "gpu1 compute mode",
            "timed out",
            "Xid",
        ),
    ];
    for (symbol, code, name, cause, fix) in cases {
        let h = Host::healthy(&format!(
            "{TWO_H100}[[fault]]\ngpu = 1\nsymbol = \"{symbol}\"\nerror = \"{code}\"\n"
        ));
        let o = h.doctor(&h.config(""), &["--format", "json"]);
        assert_eq!(o.status.code(), Some(2), "{code}: {}", text(&o));
        let c = json(&o);
        expect(&c, name, "fail", &format!("{code}: "), fix);
        expect(&c, name, "fail", cause, "");
        expect(&c, "gpu0 compute mode", "ok", "Default", "");
    }
    // A permission error on one read is "cannot tell", not a failure.
    let h = Host::healthy(&format!(
        "{TWO_H100}[[fault]]\ngpu = 0\nsymbol = \"nvmlDeviceGetEccMode\"\nerror = \"NO_PERMISSION\"\n"
    ));
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    expect(
        &json(&o),
        "gpu0 ECC",
        "warn",
        "cannot read: NO_PERMISSION",
        "video",
    );
}

#[test]
fn a_gpu_whose_calls_hang_is_reported_hung_within_the_timeout() {
    let h = Host::healthy(&format!(
        "{TWO_H100}[[fault]]\ngpu = 0\nsymbol = \"nvmlDeviceGetPersistenceMode\"\nblock = \"forever\"\n"
    ));
    let started = std::time::Instant::now();
    let o = h.doctor(&h.config(""), &["--format", "json", "--nvml-timeout", "1s"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "gpu0",
        "fail",
        "did not return within 1s",
        "reset the GPU",
    );
    expect(
        &c,
        "gpu1",
        "warn",
        "stopped at the hung gpu0",
        "fix gpu0 first",
    );
    // The setup checks still ran.
    expect(&c, "config", "ok", "valid", "");
}

#[test]
fn degraded_link_persistence_off_and_pending_remap_warn_and_exit_1() {
    let h = Host::healthy(
        "[scenario]\nname = \"d\"\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\npersistence_mode = false\n[[gpu.timeline]]\npcie_gen = 3\npcie_width = 8\nremap_pending = true\nremapped_rows_unc = 1\n",
    );
    std::fs::remove_file(h.path("proc/4242/comm")).expect("rm");
    std::fs::remove_file(h.path("dev/nvidia1")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "gpu0 PCIe link",
        "warn",
        "Gen3 x8 (maximum Gen5 x16)",
        "reseat",
    );
    expect(
        &c,
        "gpu0 persistence mode",
        "warn",
        "off; nvidia-persistenced does not run",
        "nvidia-persistenced",
    );
    expect(
        &c,
        "gpu0 memory repair",
        "warn",
        "a row remap is pending (0 correctable, 1 uncorrectable",
        "nvidia-smi -r -i 0",
    );
    expect(&c, "gpu0 MIG mode", "ok", "disabled", "");
}

/// The `gpu0 …` check of a one-GPU host whose `[[gpu]]` table has `keys` (and the timeline
/// segment `segment`), after asserting the exit code.
fn one_gpu(model: &str, keys: &str, segment: &str, code: i32) -> Vec<serde_json::Value> {
    let h = Host::healthy(&format!(
        "[scenario]\nname = \"modes\"\n[[gpu]]\nmodel = \"{model}\"\n{keys}\n[[gpu.timeline]]\n{segment}\n"
    ));
    std::fs::remove_file(h.path("dev/nvidia1")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{keys} {segment}: {}",
        text(&o)
    );
    json(&o)
}

#[test]
fn prohibited_and_exclusive_thread_compute_modes_warn_with_the_reset_command() {
    let c = one_gpu("H100-SXM-80GB", "compute_mode = \"prohibited\"", "", 1);
    expect(
        &c,
        "gpu0 compute mode",
        "warn",
        "Prohibited: no CUDA process can use this GPU",
        "nvidia-smi -i 0 -c DEFAULT",
    );
    let c = one_gpu(
        "H100-SXM-80GB",
        "compute_mode = \"exclusive_thread\"",
        "",
        1,
    );
    expect(
        &c,
        "gpu0 compute mode",
        "warn",
        "Exclusive_Thread",
        "nvidia-smi -i 0 -c DEFAULT",
    );
    let c = one_gpu(
        "H100-SXM-80GB",
        "compute_mode = \"exclusive_process\"",
        "",
        0,
    );
    expect(&c, "gpu0 compute mode", "ok", "Exclusive_Process", "");
}

#[test]
fn ecc_off_or_pending_and_a_pending_mig_change_warn() {
    let c = one_gpu("A100-SXM4-80GB", "ecc_mode = false", "", 1);
    expect(&c, "gpu0 ECC", "warn", "ECC is off", "nvidia-smi -i 0 -e 1");
    let c = one_gpu(
        "A100-SXM4-80GB",
        "ecc_mode = false\necc_mode_pending = true\nmig_mode_pending = true",
        "",
        1,
    );
    expect(
        &c,
        "gpu0 ECC",
        "warn",
        "ECC off now, on after the next reboot",
        "reboot",
    );
    expect(
        &c,
        "gpu0 MIG mode",
        "warn",
        "disabled now, enabled after the next GPU reset",
        "nvidia-smi -r -i 0",
    );
    // A board without ECC is fine as it is.
    let c = one_gpu("RTX-4090", "persistence_mode = true", "", 0);
    expect(&c, "gpu0 ECC", "ok", "no ECC on this GPU", "");
}

#[test]
fn a_failed_row_remap_fails_and_pending_retired_pages_warn() {
    let c = one_gpu(
        "H100-SXM-80GB",
        "",
        "remapped_rows_unc = 8\nremap_failure = true",
        2,
    );
    expect(
        &c,
        "gpu0 memory repair",
        "fail",
        "row remapping failed (0 correctable, 8 uncorrectable rows remapped)",
        "RMA the board",
    );
    // A T4 retires pages instead of remapping rows.
    let c = one_gpu("T4", "", "retired_pages_dbe = 2\nretired_pending = true", 1);
    expect(
        &c,
        "gpu0 memory repair",
        "warn",
        "0 pages retired for single-bit, 2 for double-bit errors; more pending retirement",
        "nvidia-smi -r -i 0",
    );
}

#[test]
fn a_mode_nvml_does_not_report_warns_cannot_tell() {
    let c = one_gpu(
        "H100-SXM-80GB",
        "not_supported = [\"nvmlDeviceGetPersistenceMode\", \"nvmlDeviceGetCurrPcieLinkGeneration\"]",
        "",
        1,
    );
    expect(
        &c,
        "gpu0 persistence mode",
        "warn",
        "cannot tell: NOT_SUPPORTED",
        "nothing to fix",
    );
    expect(
        &c,
        "gpu0 PCIe link",
        "warn",
        "cannot tell: NOT_SUPPORTED",
        "nothing to fix",
    );
    // A read that fails for an unknown reason cannot tell either (it is not a broken GPU).
    let h = Host::healthy(&format!(
        "{TWO_H100}[[fault]]\ngpu = 1\nsymbol = \"nvmlDeviceGetRemappedRows\"\nerror = \"UNKNOWN\"\n"
    ));
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    expect(
        &json(&o),
        "gpu1 memory repair",
        "warn",
        "cannot read the remapped rows: UNKNOWN",
        "",
    );
}

#[test]
fn nvml_reporting_another_driver_version_fails_and_no_gpus_warns() {
    // The file says 550.90.07 but the library inside reports 535.104.05 (a file renamed or a
    // bind mount of another driver's library).
    let h = Host::healthy(&TWO_H100.replace(
        "name = \"doctor\"",
        "name = \"doctor\"\ndriver_version = \"535.104.05\"",
    ));
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    expect(
        &json(&o),
        "driver versions",
        "fail",
        "library file 550.90.07, NVML reports 535.104.05: the library does not match",
        "host driver's libnvidia-ml",
    );

    // NVML starts and sees no GPU (a container without --gpus).
    let h = Host::healthy("[scenario]\nname = \"none\"\n");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    let c = json(&o);
    expect(
        &c,
        "nvml init",
        "warn",
        "initialised but sees no GPUs",
        "nvidia-smi -L",
    );
    expect(
        &c,
        "/dev/nvidiaN vs NVML",
        "warn",
        "nvidia0, nvidia1 for no GPU NVML lists (0 GPUs)",
        "nvidia-smi -L",
    );
}

#[test]
fn an_init_that_hangs_fails_within_the_timeout() {
    let h = Host::healthy(&TWO_H100.replace(
        "name = \"doctor\"",
        "name = \"doctor\"\ninit_block = \"forever\"",
    ));
    let started = std::time::Instant::now();
    let o = h.doctor(&h.config(""), &["--format", "json", "--nvml-timeout", "1s"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "nvml init",
        "fail",
        "nvmlInit did not return within 1s",
        "reset the GPU",
    );
    assert!(!c.iter().any(|c| c["name"] == "gpu0"), "{c:#?}");
    expect(&c, "config", "ok", "valid", "");
}
