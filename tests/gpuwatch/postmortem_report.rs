//! `gpuwatch report` end to end on the demo's database (`gpuwatch demo --speed 200`): one
//! HTML file per alert and per window, with inline SVG charts, shaded alert periods, the
//! process table and the events, nothing loaded from elsewhere, and tags that nest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use gpuwatch::store::postmortem::{self, AlertSpan};
use gpuwatch::store::{history, open_read_only};

use crate::browser_support::browse;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
}

/// The demo's database, made once for all tests of this file. At `--speed 200` a sampling
/// deadline is 10 ms of wall time, which a loaded machine misses (the ticks become gaps and
/// the demo's episodes may not fire): then the demo runs again, slower.
fn demo_db() -> &'static Path {
    &demo_run().1
}

/// The demo's database and what it printed.
fn demo_run() -> &'static (tempfile::TempDir, PathBuf, String) {
    static DB: OnceLock<(tempfile::TempDir, PathBuf, String)> = OnceLock::new();
    DB.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut last = String::new();
        for (i, speed) in ["200", "40"].iter().enumerate() {
            let db = dir.path().join(format!("demo{i}.db"));
            let out = bin()
                .args(["demo", "--speed", speed, "--every", "1h", "--db"])
                .arg(&db)
                .output()
                .expect("gpuwatch demo runs");
            assert!(
                out.status.success(),
                "demo failed (the fake NVML library is built by `cargo build --workspace`): {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let alerts = alerts_of(&db);
            let rules: Vec<&str> = alerts.iter().map(|a| a.rule.as_str()).collect();
            if ["gpu_overheating", "training_hang", "gpu_xid_error"]
                .iter()
                .all(|r| rules.contains(r))
            {
                return (dir, db, String::from_utf8_lossy(&out.stdout).into_owned());
            }
            last = format!("at --speed {speed} the demo raised only {rules:?}");
            eprintln!("{last}; running it again, slower");
        }
        panic!("{last}")
    })
}

/// The demo prints times as the database and `gpuwatch alerts` hold them (UTC): each ALERT
/// line's time is its alert's fired time.
#[test]
fn demo_lines_carry_the_alerts_utc_times() {
    let (_, _, printed) = demo_run();
    let alerts = all_alerts();
    let fired: Vec<String> = alerts
        .iter()
        .filter_map(|a| a.fired_ms)
        .map(|ms| {
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .collect();
    let lines: Vec<&str> = printed.lines().filter(|l| l.contains("] ALERT ")).collect();
    assert!(!lines.is_empty(), "{printed}");
    for l in &lines {
        let at = l.trim_start_matches('[').get(..19).unwrap_or("");
        assert!(
            fired.iter().any(|f| f == at),
            "{l}: not an alert's fired time {fired:?}"
        );
    }
}

fn report(args: &[&str], out: &Path) -> Output {
    bin()
        .arg("report")
        .arg("--db")
        .arg(demo_db())
        .arg("-o")
        .arg(out)
        .args(args)
        .output()
        .expect("gpuwatch report runs")
}

fn all_alerts() -> Vec<AlertSpan> {
    alerts_of(demo_db())
}

fn alerts_of(db: &Path) -> Vec<AlertSpan> {
    let conn = open_read_only(db).unwrap();
    let ids: Vec<i64> = history::gpus(&conn, None)
        .unwrap()
        .iter()
        .map(|g| g.gpu_id)
        .collect();
    postmortem::alerts_in(&conn, &ids, 0, i64::MAX).unwrap()
}

/// Tags nest properly (void and self-closing elements aside) and every `<` starts a tag.
fn assert_well_formed(html: &str) {
    let tag = regex::Regex::new(r"^<(/?)([a-zA-Z][a-zA-Z0-9]*)\b([^<>]*)>").unwrap();
    let body = html.strip_prefix("<!DOCTYPE html>\n").expect("a doctype");
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find('<') {
        rest = &rest[i..];
        let c = tag
            .captures(rest)
            .unwrap_or_else(|| panic!("a '<' that starts no tag: {}", &rest[..rest.len().min(80)]));
        let name = c[2].to_ascii_lowercase();
        let self_closing = c[3].trim_end().ends_with('/') || name == "meta";
        if &c[1] == "/" {
            let open = stack.pop().unwrap_or_default();
            assert_eq!(open, name, "</{name}> closes <{open}>");
        } else if !self_closing {
            stack.push(name);
        }
        rest = &rest[c[0].len()..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

/// What every report must be: one document, inline charts, nothing external.
fn check_common(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_well_formed(html);
    let svgs = html.matches("<svg").count();
    assert!(
        svgs >= 6,
        "util, memory, temperature, power and clock charts: {svgs}"
    );
    assert_eq!(svgs, html.matches("</svg>").count());
    for external in [
        "http://", "https://", "<script", "<link", "<img", "url(", "@import", "src=",
    ] {
        assert!(
            !html.contains(external),
            "the report must load nothing: found {external}"
        );
    }
    for points in regex::Regex::new(r#"points="([^"]*)""#)
        .unwrap()
        .captures_iter(html)
    {
        let n = points[1].split_whitespace().count();
        assert!(n <= 601, "a line of {n} points");
    }
    assert!(html.len() < 3 << 20, "{} bytes", html.len());
    assert!(
        html.contains("<h2>Processes</h2><table>"),
        "a process table"
    );
    assert!(html.contains("<td>python</td>"));
    assert!(html.contains("<h2>Training</h2>") && html.contains("<h3>training_loss</h3>"));
}

#[test]
fn report_for_an_alert_highlights_it_and_shades_its_span() {
    let alert = all_alerts()
        .into_iter()
        .find(|a| a.rule == "gpu_overheating" && a.resolved_ms.is_some())
        .expect("the demo overheats a GPU and recovers");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alert.html");
    let out = report(&["--alert", &alert.id.to_string()], &file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&file).unwrap();
    check_common(&html);
    assert!(html.contains(&format!(
        "<title>Alert #{} gpu_overheating on demo-node",
        alert.id
    )));
    // The alert's GPU is marked in the overview, the alert table and the legends.
    assert!(html.contains(&format!(
        "<tr class=\"focus\"><td>{}</td>",
        alert.gpu_index.unwrap()
    )));
    assert!(html.contains(&format!(
        "<tr class=\"focus\"><td>{}</td><td>gpu_overheating",
        alert.id
    )));
    assert!(html.contains(" (alert)</div>") || html.contains(" (alert)<span"));
    // Its rule-based analysis: the headline and the causes with next steps (docs/ANALYSIS.md).
    assert!(
        html.contains("<section><h2>Analysis (rule-based)</h2><p class=\"wrap\">likely cause: cooling of this GPU"),
        "the analysis section"
    );
    assert!(html.contains("<li>next: check its fan speed"), "next steps");
    // Its firing span is shaded darker than other alerts, in its severity's colour, in every GPU chart.
    let colour = match alert.severity.as_deref() {
        Some("critical") => "#DC2626",
        Some("warning") => "#F59E0B",
        _ => "#3B82F6",
    };
    let shaded =
        regex::Regex::new(&format!(r#"<rect [^>]*opacity="0.28" fill="{colour}""#)).unwrap();
    assert!(
        shaded.find_iter(&html).count() >= 6,
        "a shaded band per chart"
    );
    // The window starts 20 minutes (or the alert's length) before the alert.
    let len = alert.end_ms() - alert.active_since_ms;
    let from = alert.active_since_ms - len.max(20 * 60_000);
    let from = chrono::DateTime::from_timestamp_millis(from).unwrap();
    assert!(
        html.contains(&from.format("<p>%Y-%m-%d %H:%M:%S — ").to_string()),
        "window start"
    );
}

/// Where the work ran: the kubelet's pods in the overview, the alert's pod in the alert
/// tables, each process's pod or Slurm job in the process table.
#[test]
fn a_report_says_which_pod_or_job_held_each_gpu() {
    let alert = all_alerts()
        .into_iter()
        .find(|a| a.rule == "training_hang")
        .expect("the demo's llama job hangs");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hang.html");
    let out = report(&["--alert", &alert.id.to_string()], &file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(
        html.contains("<th>Held by (kubelet)</th>"),
        "overview column"
    );
    assert!(
        html.contains("<td class=\"wrap\">research/llama-70b-ft-0 (trainer)</td></tr>"),
        "GPU 0 and 1 are the llama pod's"
    );
    assert!(
        html.contains(
            "<tr><th>Runs in</th><td colspan=\"3\">research/llama-70b-ft-0 (trainer)</td></tr>"
        ),
        "the alert names its pod"
    );
    let window = dir.path().join("window.html");
    let out = report(&["--since", "1d"], &window);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&window).unwrap();
    assert!(
        html.contains("<td>slurm:4242</td>"),
        "GPU 3's process is Slurm job 4242's"
    );
    assert!(
        html.contains("<td>dev/notebook-bob (jupyter)</td>"),
        "GPU 2's process runs in the notebook pod"
    );
    // The usage ledger of the window: the notebook's pod held its GPU idle most of the run,
    // and is the first holder (by idle GPU-hours).
    let usage = &html[html.find("<h2>GPU usage</h2>").expect("a usage section")..];
    let first = usage.find("<tr><td>").expect("a holder row");
    assert!(
        usage[first..].starts_with("<tr><td>dev/notebook-bob</td><td>1</td>"),
        "{}",
        &usage[..usage.len().min(1200)]
    );
    assert!(usage.contains("<td>slurm job 4242 (carol)</td>"));
}

/// The report of a window holding every alert of the demo (a minute either side): the
/// alerts, the directory, the file and its text.
fn window_report() -> Window {
    let alerts = all_alerts();
    let from = alerts.iter().map(|a| a.active_since_ms).min().unwrap() - 60_000;
    let to = alerts.iter().map(|a| a.end_ms()).max().unwrap() + 60_000;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("window.html");
    let out = report(
        &[
            "--from",
            &(from / 1000).to_string(),
            "--to",
            &(to / 1000).to_string(),
        ],
        &file,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&file).unwrap();
    Window {
        alerts,
        from,
        to,
        dir,
        file,
        html,
    }
}

struct Window {
    alerts: Vec<AlertSpan>,
    from: i64,
    to: i64,
    dir: tempfile::TempDir,
    file: PathBuf,
    html: String,
}

#[test]
fn report_for_a_window_has_events_and_all_alerts() {
    let Window {
        alerts,
        from,
        to,
        dir,
        html,
        ..
    } = window_report();
    check_common(&html);
    assert!(html.contains("<title>GPU report for demo-node"));
    assert!(!html.contains("class=\"focus\""), "no alert is singled out");
    for a in &alerts {
        assert!(
            html.contains(&format!("<tr><td>{}</td><td>{}</td>", a.id, a.rule)),
            "alert {}",
            a.id
        );
    }
    assert!(html.contains("<h2>Events</h2><table>"));
    assert!(
        html.contains("<td>xid</td><td class=\"num\">48</td>"),
        "the demo's XID 48"
    );
    // What it means is said once ("XID 48: … — XID 48: …" was the catalogue twice).
    assert!(
        html.contains(">XID 48: double-bit (uncorrectable) ECC error; action: reset the GPU</td>"),
        "{}",
        &html[html.find("<h2>Events</h2>").unwrap_or(0)..]
    );
    assert_eq!(html.matches("— XID 48:").count(), 0);
    assert!(html.contains("opacity=\"0.12\""), "alert periods shaded");

    // Only GPU 3 when asked.
    let one = dir.path().join("gpu3.html");
    let out = report(
        &[
            "--from",
            &(from / 1000).to_string(),
            "--to",
            &(to / 1000).to_string(),
            "--gpu",
            "3",
        ],
        &one,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&one).unwrap();
    assert_well_formed(&html);
    assert!(html.contains("GPU 3") && !html.contains("GPU 0"));
}

#[test]
fn bad_requests_fail_clearly_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.html");
    let out = report(&["--alert", "99999"], &file);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("alert 99999 does not exist"));
    let out = report(&[], &file);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--alert ID"));
    assert!(!file.exists());
}

#[test]
fn hostile_text_is_escaped_and_unknown_values_are_gaps() {
    use gpuwatch::model::Event;
    use gpuwatch::store::synth::TickGen;
    use gpuwatch::store::{StoreConfig, open};
    const T0: i64 = 1_800_000_000_000;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let mut st = open(&db, &StoreConfig::new("node-<b>")).unwrap();
    let mut tg = TickGen::new(2, 1);
    let hostile = "python x.py --tag '<script>alert(1)</script>' & \"quoted\"";
    let batches: Vec<_> = (0..300)
        .map(|i| {
            let ts = T0 + i * 1000;
            let mut b = tg.tick(ts);
            for p in &mut b.processes {
                p.process.cmdline = Some(hostile.into());
                p.process.user = Some("<img src=x>".into());
            }
            if (100..200).contains(&i) {
                b.samples[0].util_gpu_pct = None;
                b.samples[0].temp_c = None;
            }
            if i == 150 {
                b.events.push(Event {
                    ts_ms: ts,
                    gpu_uuid: Some(tg.uuid(1)),
                    kind: "xid".into(),
                    code: Some(79),
                    message: "XID 79: <fallen off the bus>".into(),
                    ..Event::default()
                });
            }
            b
        })
        .collect();
    st.write_ticks(&batches).unwrap();
    drop(st);
    let file = dir.path().join("r.html");
    let out = bin()
        .arg("report")
        .arg("--db")
        .arg(&db)
        .arg("-o")
        .arg(&file)
        .args([
            "--from",
            &(T0 / 1000).to_string(),
            "--to",
            &(T0 / 1000 + 300).to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&file).unwrap();
    assert_well_formed(&html);
    assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<b>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("&amp; &quot;quoted&quot;") && html.contains("node-&lt;b&gt;"));
    assert!(html.contains("XID 79: &lt;fallen off the bus&gt;"));
    assert!(
        !html.contains("<h2>Training</h2>"),
        "no training data, no training section"
    );
    assert!(html.contains("No alert was active in this window."));
    // GPU 0's utilisation line is broken where its values are unknown (not drawn at 0):
    // the first (utilisation) chart holds three runs: GPU 0 before and after the gap, GPU 1.
    let first_chart = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
    let runs = first_chart.matches("stroke-width=\"2\" points=").count();
    assert_eq!(runs, 3, "{first_chart}");
}

/// The window report as a browser lays it out (1200 px wide, as the live page's test): every
/// alert's summary gets a wide row, not a narrow strip of very tall rows; every alert's band
/// in the charts says which alert and GPU it is; a screenshot renders.
#[test]
fn the_report_lays_out_readably_in_chromium() {
    let Window {
        alerts,
        dir,
        file,
        html,
        ..
    } = window_report();
    for a in &alerts {
        let gpu = a
            .gpu_index
            .map_or("host".to_string(), |i| format!("GPU {i}"));
        assert!(
            html.contains(&format!(" #{} ", a.id)) && html.contains(&format!("#{} {gpu}", a.id)),
            "alert {}'s band is labelled: #{} {gpu}",
            a.id,
            a.id
        );
    }
    // The layout as Chromium computes it: a copy of the report with a measuring script.
    let probe = dir.path().join("probe.html");
    std::fs::write(
        &probe,
        html.replace(
            "</body>",
            "<script>\
             const s=[...document.querySelectorAll('td.summary')].map(c=>c.getBoundingClientRect());\
             const r=[...document.querySelectorAll('table.alerts tr.summary')].map(c=>c.getBoundingClientRect());\
             document.body.dataset.layout=JSON.stringify({cells:s.length,\
             overflow:document.documentElement.scrollWidth-window.innerWidth,\
             minWidth:Math.min(...s.map(b=>b.width)),maxHeight:Math.max(...r.map(b=>b.height))});\
             </script></body>",
        ),
    )
    .unwrap();
    let profile = dir.path().join("profile");
    let browse = |extra: &[&str], page: &Path| {
        browse(&format!("file://{}", page.display()), &profile, extra)
    };
    let dom = browse(&["--dump-dom"], &probe);
    let layout = dom
        .split("data-layout=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(|j| j.replace("&quot;", "\""))
        .unwrap_or_else(|| panic!("no layout measured: {dom}"));
    let layout: serde_json::Value = serde_json::from_str(&layout).expect("layout json");
    assert_eq!(
        layout["cells"].as_u64(),
        Some(alerts.len() as u64),
        "{layout}"
    );
    assert!(
        layout["minWidth"].as_f64().is_some_and(|w| w >= 600.0),
        "every summary is at least 600 px wide: {layout}"
    );
    assert!(
        layout["maxHeight"].as_f64().is_some_and(|h| h <= 60.0),
        "no summary row taller than three lines: {layout}"
    );
    assert!(
        layout["overflow"].as_f64().is_some_and(|o| o <= 0.0),
        "nothing wider than the window: {layout}"
    );
    let shot = dir.path().join("report.png");
    browse(&[&format!("--screenshot={}", shot.display())], &file);
    let png = std::fs::read(&shot).expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
