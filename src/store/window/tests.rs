//! Tests of `store::window`: the source choice, names and aliases, buckets, and the metric
//! table against the rule evaluator on stored rows.

use super::*;

#[test]
fn expired_raw_samples_are_read_from_the_rollups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut store = crate::store::open(&path, &crate::store::StoreConfig::new("h")).unwrap();
    let t0 = 1_750_000_020_000 / MINUTE * MINUTE;
    let mut ticks = crate::store::synth::TickGen::new(1, 0);
    let batches: Vec<_> = (0..600).map(|i| ticks.tick(t0 + i * 1000)).collect();
    store.write_ticks(&batches).unwrap();
    store.maintain_fully().unwrap();
    let conn = store.conn();
    let ids: Vec<i64> = vec![
        conn.query_row("SELECT id FROM gpus", [], |r| r.get(0))
            .unwrap(),
    ];
    let (from, to) = (t0, t0 + 600_000);
    assert_eq!(
        Source::choose(conn, &ids, from, to, MINUTE).unwrap(),
        Source::Raw
    );
    // Retention deleted the first five minutes of raw samples; their rollups remain.
    conn.execute("DELETE FROM samples WHERE ts_ms < ?1", [t0 + 300_000])
        .unwrap();
    assert_eq!(
        Source::choose(conn, &ids, from, to, MINUTE).unwrap(),
        Source::Rollups
    );
    assert_eq!(
        Source::choose(conn, &ids, t0 + 360_000, to, MINUTE).unwrap(),
        Source::Raw,
        "a range within the raw samples stays raw"
    );
    assert_eq!(
        Source::choose(conn, &ids, from, to, 1000).unwrap(),
        Source::Raw
    );
}

#[test]
fn names_aliases_and_errors() {
    let names =
        |l: &[&str]| -> Vec<&str> { resolve_metrics(l).unwrap().iter().map(|m| m.name).collect() };
    assert_eq!(
        names(&["util", "util_gpu", "clocks"]),
        ["util_gpu", "clock_sm", "clock_mem"]
    );
    assert_eq!(
        names(&["mem", "temp", "power"]),
        ["mem_used", "temp", "power"]
    );
    let e = resolve_metrics(&["util", "xid"]).unwrap_err();
    assert!(
        e.starts_with("unknown metric \"xid\": valid metrics are util_gpu,"),
        "{e}"
    );
}

#[test]
fn buckets_are_aligned_to_the_step() {
    assert_eq!(buckets(90_000, 300_000, 60_000), (60_000, 4));
    assert_eq!(buckets(0, 60_000, 60_000), (0, 1));
    assert_eq!(Source::auto(0, 3_600_000, 60_000), Source::Raw);
    assert_eq!(Source::auto(0, 86_400_000, 30_000), Source::Raw);
    assert_eq!(Source::auto(0, 86_400_000, 90_000), Source::Raw);
    assert_eq!(Source::auto(0, 86_400_000, 120_000), Source::Rollups);
}

use crate::metric::SAMPLE_METRICS;
use crate::model::{GpuSample, SampleStatus, TickBatch};
use crate::rules::ast::Metric;
use crate::rules::names::{metric_of, metrics, sample_metric};
use crate::store::{Store, StoreConfig, open, synth::TickGen};

/// A store holding `samples` (of the generator's GPU 0, one tick per sample) and that GPU's id.
fn store_with(dir: &tempfile::TempDir, samples: Vec<GpuSample>) -> (Store, i64) {
    let tg = TickGen::new(2, 0);
    let mut st = open(&dir.path().join("w.db"), &StoreConfig::new("n1")).unwrap();
    let batches: Vec<TickBatch> = samples
        .into_iter()
        .map(|s| TickBatch {
            ts_ms: s.ts_ms,
            inventory: tg.inventory(),
            samples: vec![s],
            ..Default::default()
        })
        .collect();
    st.write_ticks(&batches).unwrap();
    let gpu = st
        .conn()
        .query_row("SELECT id FROM gpus WHERE uuid = ?1", [tg.uuid(0)], |r| {
            r.get(0)
        })
        .unwrap();
    (st, gpu)
}

fn sample(ts_ms: i64, status: SampleStatus) -> GpuSample {
    GpuSample::empty(ts_ms, &TickGen::new(2, 0).uuid(0), status)
}

/// What the rule evaluator sees of `m` in `s` (`rules::eval::world`'s feed: the registry row
/// the rule language's metric names).
fn evaluator(m: Metric, s: &GpuSample) -> Option<f64> {
    metric_of(m).and_then(|d| d.of(s))
}

/// Rows covering every column and edge: full, NULL, zero, throttle bits one by one, a zero
/// total memory, a missed deadline and a lost GPU (one per second from `t0`).
fn varied(t0: i64) -> Vec<GpuSample> {
    let mut out = Vec::new();
    let mut full = sample(t0, SampleStatus::Ok);
    full.util_gpu_pct = Some(97);
    full.util_mem_pct = Some(41);
    full.mem_used_bytes = Some(60 << 30);
    full.mem_free_bytes = Some(19 << 30);
    full.mem_total_bytes = Some(80 << 30);
    full.temp_c = Some(71);
    full.fan_pct = Some(0);
    full.clock_sm_mhz = Some(1980);
    full.clock_mem_mhz = Some(2619);
    full.power_mw = Some(612_345);
    full.power_limit_mw = Some(700_000);
    full.pstate = Some(0);
    full.pcie_tx_kbs = Some(12_345);
    full.pcie_rx_kbs = Some(999);
    full.pcie_gen = Some(5);
    full.pcie_width = Some(16);
    full.throttle_reasons = Some(0x20);
    full.ecc_corrected = Some(3);
    full.ecc_uncorrected = Some(0);
    full.retired_pages = Some(2);
    full.remapped_rows_uncorrectable = Some(1);
    full.remap_pending = Some(true);
    full.process_count = Some(4);
    out.push(full.clone());
    for (k, bits) in [0u64, 0x01, 0x08, 0x40, 0x80, 0x04, u64::MAX]
        .into_iter()
        .enumerate()
    {
        let mut s = full.clone();
        s.ts_ms = t0 + 1000 * (k as i64 + 1);
        s.throttle_reasons = Some(bits);
        s.remap_pending = Some(false);
        s.process_count = Some(0);
        out.push(s);
    }
    let mut zero_total = full.clone();
    zero_total.ts_ms = t0 + 8000;
    zero_total.mem_total_bytes = Some(0);
    out.push(zero_total);
    out.push(sample(t0 + 9000, SampleStatus::Ok)); // every value NULL
    out.push(sample(t0 + 10_000, SampleStatus::DeadlineMissed));
    out.push(sample(t0 + 11_000, SampleStatus::Lost));
    out
}

#[test]
fn the_table_holds_exactly_the_sample_metrics() {
    let is_sample = |m: Metric| matches!(m, Metric::Sample(_));
    for (name, m) in metrics() {
        assert_eq!(window_metric(name).is_some(), is_sample(m), "{name}");
        assert_eq!(metric_of(m).map(|w| w.name), is_sample(m).then_some(name));
    }
    let sample_metrics = metrics().filter(|(_, m)| is_sample(*m)).count();
    assert_eq!(
        SAMPLE_METRICS.len(),
        sample_metrics,
        "no duplicates, no extras"
    );
    let no_rollup: Vec<&str> = SAMPLE_METRICS
        .iter()
        .filter(|m| !m.has_rollup())
        .map(|m| m.name)
        .collect();
    assert!(no_rollup.contains(&"thermal_throttle") && no_rollup.contains(&"lost"));
    // The ten `gpuwatch history` offers, and the test build's probe (`crate::metric`).
    assert_eq!(SAMPLE_METRICS.len() - no_rollup.len(), 11);
}

#[test]
fn every_metric_gives_the_evaluators_number_for_each_row() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_750_000_020_000;
    let rows = varied(t0);
    let (st, gpu) = store_with(&dir, rows.clone());
    let conn = st.conn();
    let end = t0 + 1000 * rows.len() as i64;
    let got = series(conn, &[gpu], SAMPLE_METRICS, t0, end, 1000, Source::Raw).unwrap();
    assert_eq!(got.len(), SAMPLE_METRICS.len());
    for (ser, m) in got.iter().zip(SAMPLE_METRICS) {
        let metric = sample_metric(m.name).unwrap();
        assert_eq!(ser.points.len(), rows.len());
        for (p, s) in ser.points.iter().zip(&rows) {
            let want = evaluator(metric, s);
            assert_eq!(p.ts_ms, s.ts_ms);
            assert_eq!(p.avg, want, "{} at row {}", m.name, (s.ts_ms - t0) / 1000);
            assert_eq!((p.min, p.max), (want, want), "{}", m.name);
            assert_eq!(p.n, u64::from(want.is_some()), "{}", m.name);
        }
        // The aggregate over all rows: the evaluator's values, summarised by hand.
        let a = aggregate(conn, gpu, &[*m], t0, end).unwrap()[0];
        let values: Vec<f64> = rows.iter().filter_map(|s| evaluator(metric, s)).collect();
        assert_eq!(a.samples, rows.len() as u64);
        assert_eq!(a.missing, (rows.len() - values.len()) as u64, "{}", m.name);
        assert_eq!(a.min, values.iter().copied().reduce(f64::min), "{}", m.name);
        assert_eq!(a.max, values.iter().copied().reduce(f64::max), "{}", m.name);
        let avg = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
        match (a.avg, avg) {
            (Some(x), Some(y)) => assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{x} {y}"),
            (x, y) => assert_eq!(x, y, "{}", m.name),
        }
    }
}

#[test]
fn aggregates_by_hand_with_nulls_gaps_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_750_000_020_000;
    let ok = |k: i64, util: Option<u32>, throttle: Option<u64>| {
        let mut s = sample(t0 + 1000 * k, SampleStatus::Ok);
        s.util_gpu_pct = util;
        s.throttle_reasons = throttle;
        s.mem_used_bytes = util.map(|u| u64::from(u) << 20);
        s.power_mw = Some(71_500);
        s
    };
    let rows = vec![
        ok(0, Some(10), Some(0x40)),
        ok(1, None, Some(0)),
        sample(t0 + 2000, SampleStatus::DeadlineMissed),
        ok(3, Some(30), None),
        sample(t0 + 4000, SampleStatus::Lost),
        ok(5, Some(50), Some(0x21)),
    ];
    let (st, gpu) = store_with(&dir, rows);
    let conn = st.conn();
    let pick = |names: &[&str]| -> Vec<SampleMetric> {
        names.iter().map(|n| window_metric(n).unwrap()).collect()
    };
    let ms = pick(&[
        "util_gpu",
        "mem_used",
        "power",
        "thermal_throttle",
        "lost",
        "gap",
    ]);
    let a = aggregate(conn, gpu, &ms, t0, t0 + 6000).unwrap();
    let row = |a: &Aggregate| (a.samples, a.missing, a.min, a.avg, a.max);
    assert_eq!(row(&a[0]), (6, 3, Some(10.0), Some(30.0), Some(50.0)));
    assert_eq!(
        row(&a[1]),
        (6, 3, Some(10.0), Some(30.0), Some(50.0)),
        "MiB"
    );
    assert_eq!(row(&a[2]), (6, 2, Some(71.5), Some(71.5), Some(71.5)), "W");
    assert_eq!(
        row(&a[3]),
        (6, 3, Some(0.0), Some(2.0 / 3.0), Some(1.0)),
        "0/1"
    );
    assert_eq!(row(&a[4]), (6, 0, Some(0.0), Some(1.0 / 6.0), Some(1.0)));
    assert_eq!(row(&a[5]), (6, 0, Some(0.0), Some(1.0 / 6.0), Some(1.0)));
    // Half-open: [t0 + 1 s, t0 + 3 s) is the NULL and the gap.
    let a = aggregate(conn, gpu, &ms[..1], t0 + 1000, t0 + 3000).unwrap();
    assert_eq!(row(&a[0]), (2, 2, None, None, None));
    // Nothing stored: no samples, no data. Another GPU: nothing.
    let a = aggregate(conn, gpu, &ms[..1], t0 + 9000, t0 + 20_000).unwrap();
    assert_eq!(row(&a[0]), (0, 0, None, None, None));
    let a = aggregate(conn, gpu + 1, &ms[..1], t0, t0 + 6000).unwrap();
    assert_eq!(row(&a[0]), (0, 0, None, None, None));

    // The same rows as a series at a 2 s step: gaps are no data, flags 0/1 per bucket.
    let s = series(conn, &[gpu], &ms, t0, t0 + 6000, 2000, Source::Raw).unwrap();
    let avgs = |k: usize| -> Vec<Option<f64>> { s[k].points.iter().map(|p| p.avg).collect() };
    assert_eq!(avgs(0), [Some(10.0), Some(30.0), Some(50.0)]);
    assert_eq!(avgs(3), [Some(0.5), None, Some(1.0)], "thermal_throttle");
    assert_eq!(avgs(4), [Some(0.0), Some(0.0), Some(0.5)], "lost");
    assert_eq!(avgs(5), [Some(0.0), Some(0.5), Some(0.0)], "gap");
    let ns: Vec<u64> = s[0].points.iter().map(|p| p.n).collect();
    assert_eq!(ns, [1, 1, 1]);
}

#[test]
fn metrics_without_rollup_columns_have_no_data_in_the_rollups() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_750_000_020_000 / MINUTE * MINUTE;
    // One sample into a fourth minute, so that the third is complete and rolled up.
    let rows: Vec<GpuSample> = (0..=180)
        .map(|i| {
            let mut s = sample(t0 + i * 1000, SampleStatus::Ok);
            s.util_gpu_pct = Some((i % 7) as u32 * 10);
            s.throttle_reasons = Some(0x40);
            s.process_count = Some(1);
            s
        })
        .collect();
    let (mut st, gpu) = store_with(&dir, rows);
    st.maintain_fully().unwrap();
    let conn = st.conn();
    let ms: Vec<SampleMetric> = ["util_gpu", "thermal_throttle", "process_count", "lost"]
        .iter()
        .map(|n| window_metric(n).unwrap())
        .collect();
    for step in [MINUTE, 3 * MINUTE] {
        let to = t0 + 3 * MINUTE;
        let raw = series(conn, &[gpu], &ms, t0, to, step, Source::Raw).unwrap();
        let rolled = series(conn, &[gpu], &ms, t0, to, step, Source::Rollups).unwrap();
        for (r, u) in raw[0].points.iter().zip(&rolled[0].points) {
            let (x, y) = (r.avg.unwrap(), u.avg.unwrap());
            assert!((x - y).abs() < 1e-9, "util_gpu: raw {x} vs rollups {y}");
            assert_eq!((r.min, r.max, r.n), (u.min, u.max, u.n));
        }
        for k in 1..ms.len() {
            assert!(raw[k].points.iter().all(|p| p.avg.is_some()), "raw has it");
            assert!(
                rolled[k]
                    .points
                    .iter()
                    .all(|p| (p.avg, p.min, p.max, p.n) == (None, None, None, 0)),
                "{}: unknown in the rollups, not 0",
                ms[k].name
            );
        }
    }
}

#[test]
fn sample_metric_names_and_the_one_set_of_aliases() {
    assert_eq!(sample_metric("util"), Some(Metric::sample("util_gpu")));
    assert_eq!(
        sample_metric("utilization"),
        Some(Metric::sample("util_gpu"))
    );
    assert_eq!(sample_metric("temp"), Some(Metric::sample("temp")));
    assert_eq!(sample_metric("temperature"), Some(Metric::sample("temp")));
    assert_eq!(sample_metric("mem_used"), Some(Metric::sample("mem_used")));
    assert_eq!(
        sample_metric("memory_free"),
        Some(Metric::sample("mem_free"))
    );
    assert_eq!(sample_metric("power_usage"), Some(Metric::sample("power")));
    assert_eq!(sample_metric("gap"), Some(Metric::sample("gap")));
    assert_eq!(
        sample_metric("thermal_throttle"),
        Some(Metric::sample("thermal_throttle"))
    );
    assert_eq!(sample_metric("clocks"), None, "an alias of two metrics");
    assert_eq!(sample_metric("xid"), None);
    assert_eq!(sample_metric("process_mem"), None);
    assert_eq!(sample_metric("training_step"), None);
    assert_eq!(sample_metric("no_such_metric"), None);
    // `history` offers the metrics with rollups only, and lists only aliases it accepts.
    let e = resolve_metrics(&["thermal_throttle"]).unwrap_err();
    assert!(e.starts_with("unknown metric \"thermal_throttle\""), "{e}");
    let e = resolve_metrics(&["memory_free"]).unwrap_err();
    assert!(
        !e.contains("memory_free,") && e.contains("power_usage"),
        "{e}"
    );
    assert_eq!(resolve_metrics(&["power_usage"]).unwrap()[0].name, "power");
}
