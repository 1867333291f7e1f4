//! The tick's counters through NVML's batch `nvmlDeviceGetFieldValues`, with the per-field
//! fallback to the single calls, against the simulated library.

use std::time::Duration;

use crate::common::{Rig, rig};

const ONE_GPU: &str = r#"
[scenario]
name = "fields"
duration = "10m"
seed = 3

[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = { value = 90 }

[[gpu]]
model = "A100-SXM4-40GB"
[[gpu.timeline]]
util_gpu = { value = 50 }
"#;

/// Device calls the simulated library answered so far (its own counter).
fn calls(r: &Rig) -> u64 {
    // SAFETY: the library is already loaded from this path; the symbol is `u64 (void)`.
    unsafe {
        let lib = libloading::Library::new(r.sim.library_path()).expect("library");
        let f: libloading::Symbol<unsafe extern "C" fn() -> u64> =
            lib.get(b"gpuwatchFakeCallCount").expect("symbol");
        f()
    }
}

fn assert_counters_match(r: &mut Rig) {
    let n = r.n;
    let b = r.tick();
    for (i, s) in b.samples.iter().enumerate() {
        let want = r.sim.scenario.gpu_state(i, n);
        assert_eq!(s.energy_mj, Some(want.energy_mj), "gpu {i} energy");
        assert_eq!(s.ecc_corrected, Some(want.ecc_corrected), "gpu {i} ecc");
        assert_eq!(s.ecc_uncorrected, Some(want.ecc_uncorrected), "gpu {i} ecc");
        assert_eq!(
            s.remapped_rows_correctable,
            Some(want.remapped_rows_corr),
            "gpu {i} remapped rows"
        );
        assert_eq!(s.remap_pending, Some(want.remap_pending), "gpu {i} remap");
        assert_eq!(s.remap_failure, Some(false), "gpu {i} remap failure");
    }
}

#[test]
fn the_batch_reads_what_the_single_calls_read_with_four_calls_fewer() {
    let mut ok = rig(ONE_GPU, Duration::from_secs(2));
    ok.tick();
    let before = calls(&ok);
    assert_counters_match(&mut ok);
    let batched = calls(&ok) - before;

    // The batch call fails every time: every counter comes from its own call.
    let broken = format!(
        "{ONE_GPU}\n[[fault]]\nsymbol = \"nvmlDeviceGetFieldValues\"\nerror = \"UNKNOWN\"\n"
    );
    let mut fb = rig(&broken, Duration::from_secs(2));
    fb.tick();
    let before = calls(&fb);
    assert_counters_match(&mut fb);
    let single = calls(&fb) - before;
    // Energy, two ECC totals and remapped rows: four calls per GPU become one batch.
    assert_eq!(
        single,
        batched + 2 * 4,
        "calls per tick: batch {batched}, single {single}"
    );
}

#[test]
fn a_field_the_gpu_does_not_serve_is_unknown_and_the_others_are_read() {
    let scenario = format!(
        "{ONE_GPU}\n[[fault]]\ngpu = 0\nsymbol = \"nvmlDeviceGetTotalEnergyConsumption\"\nerror = \"NOT_SUPPORTED\"\n"
    );
    let mut r = rig(&scenario, Duration::from_secs(2));
    for _ in 0..3 {
        let n = r.n;
        let b = r.tick();
        let want = r.sim.scenario.gpu_state(0, n);
        assert_eq!(b.samples[0].energy_mj, None, "NOT_SUPPORTED is NULL, not 0");
        assert_eq!(b.samples[0].ecc_corrected, Some(want.ecc_corrected));
        assert_eq!(
            b.samples[1].energy_mj,
            Some(r.sim.scenario.gpu_state(1, n).energy_mj),
            "the other GPU still reports energy"
        );
    }
}
