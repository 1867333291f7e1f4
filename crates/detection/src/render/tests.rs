//! Renderer tests: a rendered log re-parses to the sim's values, with and without units.

use super::*;

const TINY: &str = r#"
[scenario]
tick_ms = 1000
duration = 600
seed = 4
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = { value = 80, noise = 5 }
[[gpu.timeline]]
from = 120
to = 300
temp = { ramp = [70, 90] }
throttle = ["sw_thermal"]
[[gpu]]
model = "H100-SXM-80GB"
[[process]]
pid = 42
name = "train"
gpu = 0
mem_mib = { ramp = [1000, 5000], over = 300, noise = 10 }
[[process]]
pid = 43
name = "eval"
gpu = 1
start = 200
end = 400
[[training]]
job = "j"
gpus = [0, 1]
steps_per_sec = 1
per_gpu = true
[[training.stall]]
from = 300
to = 360
kind = "gap"
"#;

fn scenario() -> Scenario {
    Scenario::from_toml_str(TINY, "tiny.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// A CSV log as (field names, rows of (epoch ms, cells without units)).
fn parse(text: &str) -> (Vec<String>, Vec<(i64, Vec<String>)>) {
    let mut lines = text.lines();
    let head: Vec<String> = lines
        .next()
        .unwrap_or_default()
        .split(", ")
        .map(|c| c.split(" [").next().unwrap_or(c).to_string())
        .collect();
    let rows = lines
        .map(|l| {
            let cells: Vec<String> = l
                .split(", ")
                .map(|c| {
                    let c = c.trim();
                    ["%", "MiB", "W", "MHz"]
                        .iter()
                        .find_map(|u| c.strip_suffix(&format!(" {u}")))
                        .unwrap_or(c)
                        .to_string()
                })
                .collect();
            let ts = chrono::NaiveDateTime::parse_from_str(&cells[0], "%Y/%m/%d %H:%M:%S%.3f")
                .unwrap_or_else(|e| panic!("{}: {e}", cells[0]))
                .and_utc()
                .timestamp_millis();
            (ts, cells)
        })
        .collect();
    (head, rows)
}

fn col(head: &[String], name: &str) -> usize {
    head.iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {head:?}"))
}

#[test]
fn full_log_re_parses_to_the_sim_values_with_and_without_units() {
    let s = scenario();
    for units in [true, false] {
        let style = CsvStyle {
            kind: Kind::Full,
            apps: true,
            interval_s: 5,
            units,
        };
        let files = csv(&s, style, &mut fastrand::Rng::with_seed(1));
        assert_eq!(
            files
                .gpu
                .lines()
                .next()
                .is_some_and(|h| h.contains("utilization.gpu [%]")),
            units
        );
        assert!(units || !files.gpu.contains(" %"));
        let (head, rows) = parse(&files.gpu);
        assert_eq!(rows.len(), 2 * 600 / 5);
        let mut last = i64::MIN;
        for pair in rows.chunks(2) {
            assert_eq!(pair[0].0, pair[1].0, "one stamp per poll");
            assert!(pair[0].0 > last, "stamps increase");
            last = pair[0].0;
            for (ts, cells) in pair {
                let tick = ((ts - BASE_MS) / 1000) as u64;
                assert_eq!(tick % 5, 0);
                let g: usize = cells[col(&head, "index")].parse().unwrap_or(99);
                let st = s.gpu_state(g, tick);
                let spec = s.gpu(g);
                let num =
                    |name: &str| -> f64 { cells[col(&head, name)].parse().unwrap_or(f64::NAN) };
                assert_eq!(cells[col(&head, "uuid")], spec.uuid);
                assert_eq!(num("utilization.gpu"), f64::from(st.util_gpu));
                assert_eq!(num("memory.used"), (st.mem_used_bytes as f64 / MIB).round());
                assert_eq!(num("temperature.gpu"), f64::from(st.temp_c));
                assert_eq!(
                    num("temperature.gpu") + num("temperature.gpu.tlimit"),
                    f64::from(spec.temp_gpu_max_c),
                    "tlimit is T.Limit - temp"
                );
                assert!((num("power.draw") - f64::from(st.power_mw) / 1000.0).abs() < 0.006);
                let mask = &cells[col(&head, "clocks_event_reasons.active")];
                assert_eq!(mask, &format!("0x{:016X}", st.throttle_reasons));
                assert_eq!(cells[col(&head, "pstate")], format!("P{}", st.pstate));
            }
        }
        let (apps_head, apps) = parse(files.apps.as_deref().unwrap_or_default());
        assert_eq!(apps_head[1], "gpu_uuid");
        let expected: usize = (0..600)
            .step_by(5)
            .map(|t| s.processes_at(0, t).len() + s.processes_at(1, t).len())
            .sum();
        assert_eq!(apps.len(), expected, "one row per live process and poll");
        for (ts, cells) in &apps {
            let tick = ((ts - BASE_MS) / 1000) as u64;
            let g = usize::from(cells[1] != s.gpu(0).uuid);
            let p = s
                .processes_at(g, tick)
                .into_iter()
                .find(|p| p.pid.to_string() == cells[2])
                .unwrap_or_else(|| panic!("pid {} not live at {tick}", cells[2]));
            assert_eq!(cells[4], format!("{:.0}", p.used_bytes as f64 / MIB));
        }
    }
}

#[test]
fn reduced_shapes_have_their_columns_and_gpus() {
    let s = scenario();
    let style = |kind, apps, interval_s| CsvStyle {
        kind,
        apps,
        interval_s,
        units: false,
    };
    let basic = csv(
        &s,
        style(Kind::Basic, true, 60),
        &mut fastrand::Rng::with_seed(2),
    );
    let (head, rows) = parse(&basic.gpu);
    assert!(head.contains(&"pci.bus_id".to_string()) && !head.contains(&"uuid".to_string()));
    assert_eq!(rows.len(), 2 * 10);
    let apps = basic.apps.unwrap_or_default();
    assert!(apps.starts_with("timestamp, gpu_bus_id, pid"), "{apps}");
    assert!(apps.contains(&s.gpu(1).pci_bus_id));
    let minimal = csv(
        &s,
        style(Kind::Minimal, false, 15),
        &mut fastrand::Rng::with_seed(3),
    );
    let (head, rows) = parse(&minimal.gpu);
    assert_eq!(head, ["timestamp", "utilization.gpu", "memory.used"]);
    assert_eq!(rows.len(), 40, "GPU 0 only");
    assert!(minimal.apps.is_none());
}

#[test]
fn training_scrape_every_15s_with_the_gap_left_out() {
    let s = scenario();
    let om = openmetrics(&s, &[0, 1]).unwrap_or_default();
    assert!(om.ends_with("# EOF\n"));
    let points: Vec<&str> = om
        .lines()
        .filter(|l| l.starts_with("training_step{"))
        .collect();
    // 40 scrapes, 4 of them (300, 315, 330, 345) in the gap, 2 series.
    assert_eq!(points.len(), 2 * 36);
    assert!(om.contains("training_step{gpu=\"1\",job=\"j\"} 15 1740960015.000\n"));
    assert!(!om.contains(" 1740960300.000"));
    let only0 = openmetrics(&s, &[0]).unwrap_or_default();
    assert!(!only0.contains("gpu=\"1\""));
}

#[test]
fn tlimit_only_for_models_whose_drivers_report_it() {
    let s = gpuwatch_sim::Scenario::from_toml_str(
        "[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu]]\nmodel = \"A100-SXM4-40GB\"\n[[gpu]]\nmodel = \"T4\"\n",
        "t",
    )
    .expect("scenario");
    let got: Vec<bool> = (0..3).map(|g| super::reports_tlimit(s.gpu(g))).collect();
    assert_eq!(got, [true, false, false]);
}
