//! Unit tests of the OpenMetrics / Prometheus text parser.

use super::*;

#[test]
fn openmetrics_seconds_and_counters() {
    let text = "# TYPE training_step counter\n# HELP training_step Steps.\ntraining_step_total{job=\"a\",gpu=\"1\"} 17 1764511500.25\ntraining_step_created{job=\"a\",gpu=\"1\"} 1764511000 1764511500.25\n# EOF\n";
    let e = parse(text, None).unwrap();
    assert_eq!(e.format, Format::OpenMetrics);
    assert_eq!(e.samples.len(), 2);
    let s = &e.samples[0];
    assert_eq!(s.ts_ms, 1_764_511_500_250);
    assert_eq!(
        s.labels,
        vec![("gpu".into(), "1".into()), ("job".into(), "a".into())]
    );
    assert_eq!(e.family_of("training_step_total"), "training_step");
    assert_eq!(e.kind_of("training_step_created"), Some("counter"));
}

#[test]
fn prometheus_milliseconds_comments_and_escapes() {
    let text = "# a free comment\n\nloss{path=\"C:\\\\x\",msg=\"a \\\"b\\\"\\n\",} 0.5 1764511500250\nloss 1e-3\t1764511501000\n";
    let e = parse(text, None).unwrap();
    assert_eq!(e.format, Format::Prometheus);
    assert_eq!(e.samples[0].ts_ms, 1_764_511_500_250);
    assert_eq!(e.samples[0].labels[0], ("msg".into(), "a \"b\"\n".into()));
    assert_eq!(e.samples[0].labels[1], ("path".into(), "C:\\x".into()));
    assert_eq!(e.samples[1].value, 0.001);
}

#[test]
fn errors_name_line_column_and_what_is_expected() {
    let cases: &[(&str, Option<Format>, usize, usize, &str)] = &[
        ("a{b=\"1\" 2 3\n", None, 1, 9, "`,` or `}`"),
        ("a 1\n", None, 1, 4, "timestamp"),
        ("a 1 2\nb{x=\"1\",x=\"2\"} 1 2\n", None, 2, 9, "twice"),
        ("a one 2\n", None, 1, 3, "a number"),
        ("a 1 2.5\n", None, 1, 5, "integer unix milliseconds"),
        ("a 1 2\n# EOF\nb 1 2\n", None, 2, 1, "must be the last line"),
        (
            "a 1 2\n# EOF\nb 1 2\n",
            Some(Format::OpenMetrics),
            3,
            1,
            "nothing may follow",
        ),
        (
            "a 1 2\n",
            Some(Format::OpenMetrics),
            2,
            1,
            "expected `# EOF`",
        ),
        (
            "# TYPE a countr\na 1 2\n# EOF\n",
            None,
            1,
            10,
            "unknown metric type",
        ),
        (
            "# comment\na 1 2\n# EOF\n",
            None,
            1,
            2,
            "OpenMetrics has no other comments",
        ),
        ("a{b=\"x\\q\"} 1 2\n", None, 1, 8, "unknown escape"),
        ("é 1 2\n", None, 1, 1, "a metric name"),
    ];
    for (text, format, line, col, want) in cases {
        let e = parse(text, *format).expect_err(text);
        assert_eq!((e.line, e.col), (*line, *col), "{text:?}: {e}");
        assert!(e.message.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn a_scrape_without_timestamps_takes_the_given_time() {
    let text = "a{x=\"1\"} 5\nb 6 7\n";
    assert!(parse(text, None).is_err());
    let e = parse_at(text, None, Some(42_000)).unwrap_err();
    assert!(e.message.contains("looks like seconds"), "{e:?}");
    let text = "a{x=\"1\"} 5\nb 6 1764511500007\n";
    let e = parse_at(text, None, Some(1_764_511_500_000)).unwrap();
    assert_eq!(
        (e.samples[0].ts_ms, e.samples[1].ts_ms),
        (1_764_511_500_000, 1_764_511_500_007)
    );
}

#[test]
fn special_values_and_exemplars() {
    let text = "a NaN 1\nb +Inf 2 # {trace_id=\"x\"} 1\nc -Inf 3\n# EOF\n";
    let e = parse(text, None).unwrap();
    assert!(e.samples[0].value.is_nan());
    assert_eq!(e.samples[1].value, f64::INFINITY);
    assert_eq!(e.samples[2].ts_ms, 3000);
}

#[test]
fn seconds_in_a_file_without_eof_are_refused_not_stored_in_1970() {
    let text = "training_step{gpu=\"0\"} 5 1764511500\n";
    let e = parse(text, None).unwrap_err();
    assert_eq!((e.line, e.col), (1, 1), "{e:?}");
    assert!(e.message.contains("looks like seconds"), "{e:?}");
    let ok = parse("training_step{gpu=\"0\"} 5 1764511500000\n", None).unwrap();
    assert_eq!(ok.samples[0].ts_ms, 1_764_511_500_000);
}
