//! The per-GPU mode keys (`compute_mode`, `ecc_mode`, `ecc_mode_pending`, `mig_mode_pending`),
//! the timeline's `remap_failure` and `[scenario] init_block`: defaults, values, and errors.

use std::time::Duration;

use gpuwatch_sim::Scenario;

fn parse(text: &str) -> Scenario {
    Scenario::from_toml_str(text, "t.toml").expect("valid scenario")
}

#[test]
fn modes_default_to_a_healthy_gpu_and_take_the_scenarios_values() {
    let s = parse("[[gpu]]\nmodel = \"A100-SXM4-80GB\"\n");
    let g = s.gpu(0);
    assert_eq!(g.compute_mode, 0);
    assert!(g.ecc_mode && g.ecc_mode_pending);
    assert!(!g.mig_mode && !g.mig_mode_pending);
    assert!(!s.gpu_state(0, 10).remap_failure);
    assert_eq!(s.init_block(), None);

    let s = parse(
        "[scenario]\ninit_block = \"forever\"\n\
         [[gpu]]\nmodel = \"A100-SXM4-80GB\"\ncompute_mode = \"prohibited\"\necc_mode = false\nmig_mode_pending = true\n\
         [[gpu.timeline]]\nfrom = \"1m\"\nremap_failure = true\n\
         [[gpu]]\nmodel = \"H100-SXM-80GB\"\ncompute_mode = \"Exclusive_Process\"\necc_mode_pending = false\n",
    );
    let (g0, g1) = (s.gpu(0), s.gpu(1));
    assert_eq!((g0.compute_mode, g1.compute_mode), (2, 3));
    assert!(
        !g0.ecc_mode && !g0.ecc_mode_pending,
        "pending follows current"
    );
    assert!(g1.ecc_mode && !g1.ecc_mode_pending);
    assert!(!g0.mig_mode && g0.mig_mode_pending);
    assert!(!s.gpu_state(0, 59).remap_failure && s.gpu_state(0, 60).remap_failure);
    assert_eq!(s.init_block(), Some(Duration::MAX));
    let s = parse(
        "[scenario]\ninit_block = \"2s\"\n[[gpu]]\nmodel = \"T4\"\ncompute_mode = \"exclusive_thread\"\n",
    );
    assert_eq!(s.init_block(), Some(Duration::from_secs(2)));
    assert_eq!(s.gpu(0).compute_mode, 1);
}

#[test]
fn an_unknown_compute_mode_or_ecc_on_a_board_without_it_is_an_error() {
    let e = Scenario::from_toml_str(
        "[[gpu]]\nmodel = \"T4\"\ncompute_mode = \"shared\"\n",
        "t.toml",
    )
    .expect_err("unknown mode");
    let text = e.to_string();
    assert!(
        text.contains("t.toml:3:") && text.contains("unknown compute mode `shared`"),
        "{text}"
    );

    let e = Scenario::from_toml_str(
        "[[gpu]]\nmodel = \"RTX-4090\"\necc_mode = false\n",
        "t.toml",
    )
    .expect_err("no ECC");
    let text = e.to_string();
    assert!(
        text.contains("t.toml:3:") && text.contains("RTX-4090 has no ECC"),
        "{text}"
    );
    // Unless the scenario gives it ECC.
    parse(
        "[[gpu]]\nmodel = \"RTX-4090\"\nsupported = [\"nvmlDeviceGetEccMode\"]\necc_mode = false\n",
    );
}
