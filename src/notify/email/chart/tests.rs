//! Tests of the email chart: bucket widths, pixel columns, gaps, a drawn PNG and its stats.

use super::*;

fn spec() -> Spec {
    Spec {
        alert: 0,
        gpu_id: 1,
        metric: crate::metric::SampleId::named("util_gpu").def(),
        starts_ms: 2_400_000,
        ends_ms: None,
        firing: true,
        severity: "warning".into(),
    }
}

/// A bucket of one sample (or none).
fn point(ts_ms: TsMs, v: Option<f64>) -> Point {
    Point {
        ts_ms,
        avg: v,
        min: v,
        max: v,
        n: u64::from(v.is_some()),
    }
}

fn bucket(t: TsMs, v: f64) -> Bucket {
    Bucket {
        t,
        avg: v,
        min: v,
        max: v,
        n: 1,
    }
}

#[test]
fn at_most_300_buckets_of_whole_seconds() {
    assert_eq!(step_ms(WINDOW_MS), 12_000);
    assert_eq!(step_ms(60_000), 1000);
    assert_eq!(step_ms(3_600_001), 13_000);
    assert!(WINDOW_MS / step_ms(WINDOW_MS) <= MAX_BUCKETS);
}

#[test]
fn columns_aggregate_each_pixel() {
    let seg = [
        bucket(0, 1.0),
        bucket(5, 3.0),
        bucket(10, 7.0),
        bucket(25, 2.0),
    ];
    let c = columns(&seg, 0, 10);
    assert_eq!(c.len(), 3);
    assert_eq!((c[0].t, c[0].min, c[0].max, c[0].avg), (5, 1.0, 3.0, 2.0));
    assert_eq!((c[1].t, c[1].avg), (15, 7.0));
    assert_eq!((c[2].t, c[2].avg), (25, 2.0));
    // Buckets of several samples: extremes kept, the average weighted by samples.
    let wide = [
        Bucket {
            t: 1,
            avg: 2.0,
            min: 0.0,
            max: 4.0,
            n: 3,
        },
        Bucket {
            t: 6,
            avg: 6.0,
            min: 5.0,
            max: 9.0,
            n: 1,
        },
    ];
    let c = columns(&wide, 0, 10);
    assert_eq!((c[0].min, c[0].max, c[0].avg), (0.0, 9.0, 3.0));
}

#[test]
fn gaps_split_the_line() {
    let p = [
        point(0, Some(1.0)),
        point(10, None),
        point(20, Some(2.0)),
        point(30, Some(3.0)),
    ];
    let t = |seg: &Vec<Bucket>| -> Vec<(TsMs, f64)> { seg.iter().map(|b| (b.t, b.avg)).collect() };
    let segs = segments(&p, 10, 0, 35);
    assert_eq!(segs.len(), 2);
    // Each bucket at its middle, the last one clamped to the window's end.
    assert_eq!(t(&segs[0]), [(5, 1.0)]);
    assert_eq!(t(&segs[1]), [(25, 2.0), (35, 3.0)]);
}

#[test]
fn draws_a_png_with_the_span_shaded() {
    // 12 s buckets of an hour: 95 % until 40 min, then 2 %; a two-minute gap at ~17 min;
    // one bucket at 20 min spread from 1 % to 99 % (the stats take the buckets' extremes).
    let step = step_ms(WINDOW_MS);
    let points: Vec<Point> = (0..WINDOW_MS / step)
        .map(|i| {
            let t = i * step;
            if (85..95).contains(&i) {
                point(t, None)
            } else if i == 100 {
                Point {
                    ts_ms: t,
                    avg: Some(48.5),
                    min: Some(1.0),
                    max: Some(99.0),
                    n: 12,
                }
            } else {
                Point {
                    n: 12,
                    ..point(t, Some(if t >= 2_400_000 { 2.0 } else { 95.0 }))
                }
            }
        })
        .collect();
    let Outcome::Image { png, stats } = draw_one(&spec(), "%", &points, step, 0, WINDOW_MS) else {
        panic!("no image");
    };
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() < 40_000, "{}", png.len());
    assert_eq!((stats.min, stats.max, stats.last), (1.0, 99.0, 2.0));
    assert_eq!((stats.unit, stats.samples), ("%", 290 * 12));
    assert_eq!((stats.first_ms, stats.last_ms), (0, WINDOW_MS - step));
}

#[test]
fn no_samples_is_a_note() {
    let o = draw_one(&spec(), "%", &[point(5, None)], 1000, 0, WINDOW_MS);
    assert!(matches!(o, Outcome::Note(n) if n.contains("no util_gpu samples")));
}
