//! `gpuwatch incident ID --explain` / `--show-prompt` against a local stub of OpenAI's
//! `/v1/chat/completions` (a JSON answer or a streamed one, recording every request, failing
//! on demand): the prompt carries the alert's facts and no secret or redacted string, the
//! stored request is the one sent, and 429 / 500 / garbage / timeout / a closed port each
//! give one note line while the rule-based analysis is still printed. Also the `[analysis]`
//! section's errors.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::analysis_support;
use crate::analysis_support::{Mode, gpuwatch, ok_stdout, play, stub};

/// The demo's database, made once for the tests of this file.
fn demo_db() -> &'static Path {
    static DB: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DB.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = play(dir.path(), "scenarios/demo.toml", "demo");
        (dir, db)
    })
    .1
}

/// The id of the demo's first training_hang alert.
fn hang_id() -> String {
    let o = gpuwatch(&[
        "alerts",
        "--rule",
        "training_hang",
        "--format",
        "json",
        "--db",
    ])
    .arg(demo_db())
    .output()
    .expect("run");
    let v: Value = serde_json::from_str(&ok_stdout(&o)).expect("json");
    v[0]["alert_id"].as_i64().expect("a hang").to_string()
}

const KEY: &str = "sk-test-0123456789abcdef";

/// A config for `port` with `extra` lines in `[analysis]`, written to `dir` with a copy of
/// the demo's database (tests running at once store their requests apart).
fn config(dir: &Path, port: u16, extra: &str) -> PathBuf {
    let db = dir.join("demo.db");
    std::fs::copy(demo_db(), &db).expect("copy the database");
    let path = dir.join("gpuwatch.toml");
    std::fs::write(
        &path,
        format!(
            "host = \"demo-node\"\ndatabase = {:?}\n[analysis]\nurl = \"http://127.0.0.1:{port}/v1/\"\nmodel = \"stub-model\"\napi_key_env = \"GPUWATCH_TEST_LLM_KEY\"\nredact = [\"llama-70b-ft\", \"re:notebook-[a-z]+\"]\n{extra}\n",
            db
        ),
    )
    .expect("config");
    path
}

fn explain(cfg: &Path, id: &str, format: &str) -> std::process::Output {
    gpuwatch(&["incident", id, "--explain", "--format", format, "-c"])
        .arg(cfg)
        .env("GPUWATCH_TEST_LLM_KEY", KEY)
        .output()
        .expect("run")
}

#[test]
fn explain_sends_the_facts_redacted_and_prints_the_answer_marked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = stub(Mode::Json(
        "Cause: a stuck NCCL collective.\nNext: py-spy dump every rank.".into(),
    ));
    let cfg = config(dir.path(), s.port, "");
    let id = hang_id();
    let out = ok_stdout(&explain(&cfg, &id, "text"));
    let facts = out
        .find("Analysis (rule-based):")
        .expect("the rule-based analysis");
    let mark = out
        .find("Machine-written explanation (model stub-model at http://127.0.0.1:")
        .expect("the answer, marked");
    assert!(facts < mark, "{out}");
    assert!(
        out.contains("  | Cause: a stuck NCCL collective.\n  | Next: py-spy dump every rank.\n"),
        "{out}"
    );

    let reqs = s.requests.lock().expect("lock").clone();
    assert_eq!(reqs.len(), 1);
    let (line, headers, body) = &reqs[0];
    assert_eq!(line, "POST /v1/chat/completions HTTP/1.1");
    assert!(
        headers.contains(&("authorization".into(), format!("Bearer {KEY}"))),
        "{headers:?}"
    );
    let v: Value = serde_json::from_str(body).expect("the body is JSON");
    assert_eq!(v["model"], "stub-model");
    assert_eq!(v["stream"], false);
    let user = v["messages"][1]["content"].as_str().expect("user message");
    for fact in [
        "training_hang",
        "a stuck collective",
        "training_step",
        "stopped advancing",
    ] {
        assert!(
            user.contains(fact),
            "{fact} missing from the prompt: {user}"
        );
    }
    // Redacted strings and the key never leave; the redaction marker does.
    assert!(!body.contains("llama-70b-ft"), "{body}");
    assert!(!body.contains("notebook-bob"), "{body}");
    assert!(!body.contains(KEY), "{body}");
    assert!(body.contains("[redacted]"), "{body}");

    // The stored request is exactly what was sent.
    let shown = gpuwatch(&["incident", &id, "--show-prompt", "--format", "json", "-c"])
        .arg(&cfg)
        .output()
        .expect("run");
    let shown: Value = serde_json::from_str(&ok_stdout(&shown)).expect("json");
    assert_eq!(shown["request"], v);
    assert_eq!(shown["status"], "answered");
    assert_eq!(
        shown["endpoint"],
        format!("http://127.0.0.1:{}/v1/chat/completions", s.port)
    );
    assert!(
        shown["answer"]
            .as_str()
            .expect("answer")
            .starts_with("Cause:")
    );
    let text = gpuwatch(&["incident", &id, "--show-prompt", "-c"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert!(
        ok_stdout(&text).contains(body.as_str()),
        "the text shows the body as sent"
    );

    // JSON: the explanation beside the analysis.
    let j: Value = serde_json::from_str(&ok_stdout(&explain(&cfg, &id, "json"))).expect("json");
    assert_eq!(j["explanation"]["machine_written"], true);
    assert!(
        j["explanation"]["answer"]
            .as_str()
            .expect("a")
            .contains("NCCL")
    );
    assert!(j["analysis"]["causes"][0]["cause"].is_string());
}

#[test]
fn a_streamed_answer_is_assembled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = stub(Mode::Stream(vec!["A stuck ".into(), "collective.".into()]));
    let cfg = config(dir.path(), s.port, "stream = true");
    let out = ok_stdout(&explain(&cfg, &hang_id(), "text"));
    assert!(out.contains("  | A stuck collective.\n"), "{out}");
    let reqs = s.requests.lock().expect("lock").clone();
    let v: Value = serde_json::from_str(&reqs[0].2).expect("json");
    assert_eq!(v["stream"], true);
}

#[test]
fn failures_are_one_note_and_the_analysis_still_prints() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let cases: Vec<(Option<Mode>, &str, &str)> = vec![
        (
            Some(Mode::Status(429)),
            "",
            "rate-limiting requests (HTTP 429)",
        ),
        (Some(Mode::Status(500)), "", "the server failed (HTTP 500)"),
        (
            Some(Mode::Garbage),
            "",
            "the answer is not a chat completion",
        ),
        (
            Some(Mode::Hang(Duration::from_secs(10))),
            "timeout = \"1s\"",
            "no answer within 1s",
        ),
        (None, "", "cannot reach http://127.0.0.1:"),
    ];
    let id = hang_id();
    for (mode, extra, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = match mode {
            Some(m) => stub(m).port,
            None => closed,
        };
        let cfg = config(dir.path(), port, extra);
        let started = std::time::Instant::now();
        let out = ok_stdout(&explain(&cfg, &id, "text"));
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{want}: bounded by the timeout"
        );
        assert!(out.contains("Analysis (rule-based):"), "{want}: {out}");
        let notes: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("note: no machine-written explanation: "))
            .collect();
        assert_eq!(notes.len(), 1, "{want}: {out}");
        assert!(notes[0].contains(want), "{want}: {}", notes[0]);
        assert!(!out.contains("Machine-written explanation"), "{out}");
        let shown = gpuwatch(&["incident", &id, "--show-prompt", "--format", "json", "-c"])
            .arg(&cfg)
            .output()
            .expect("run");
        let shown: Value = serde_json::from_str(&ok_stdout(&shown)).expect("json");
        assert_eq!(shown["status"], "failed", "{want}");
        assert!(
            shown["error"].as_str().expect("error").contains(want),
            "{shown}"
        );
    }
}

#[test]
fn explain_without_a_section_and_bad_sections_fail_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, format!("database = {:?}\n", demo_db())).expect("write");
    let o = gpuwatch(&["incident", &hang_id(), "--explain", "-c"])
        .arg(&plain)
        .output()
        .expect("run");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--explain needs an [analysis] section"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bad = |text: &str| {
        gpuwatch::config::Config::parse(text, Path::new("g.toml"))
            .expect_err("invalid")
            .to_string()
    };
    let e = bad("[analysis]\nurl = \"http://x/v1\"\nmodel = \"m\"\napi_key = \"sk-1\"\n");
    assert!(e.starts_with("g.toml:4:1: unknown field `api_key`"), "{e}");
    let e = bad("[analysis]\nurl = \"http://x/v1\"\nmodel = \"m\"\nredact = [\"re:([\"]\n");
    assert!(
        e.starts_with(
            "g.toml:4:11: `analysis.redact` pattern \"([\" is not a valid regular expression"
        ),
        "{e}"
    );
    let e = bad(
        "[analysis]\nurl = \"http://u:p@x/v1/chat/completions\"\nmodel = \"m\"\nattach_to = [\"email\"]\n",
    );
    assert!(
        e.contains("g.toml:2:7: `analysis.url` contains credentials"),
        "{e}"
    );
    assert!(e.contains("already ends with /chat/completions"), "{e}");
    assert!(
        e.contains("g.toml:4:14: `analysis.attach_to` = \"email\""),
        "{e}"
    );
    let e = bad("[analysis]\nurl = \"http://x/v1\"\n");
    assert!(e.contains("`analysis.model` is missing"), "{e}");
    let ok = gpuwatch::config::Config::parse(
        "[analysis]\nurl = \"http://127.0.0.1:8000/v1/\"\nmodel = \"m\"\napi_key_file = \"/run/k\"\n",
        Path::new("g.toml"),
    )
    .expect("valid");
    let a = ok.analysis.expect("on");
    assert_eq!(a.url, "http://127.0.0.1:8000/v1");
    assert_eq!(a.max_tokens, 400);
    assert!(
        gpuwatch::config::Config::parse("", Path::new("g.toml"))
            .expect("empty")
            .analysis
            .is_none()
    );
}

/// A config delivering to a Slack webhook served by `slack` with `[analysis]` follow-ups from
/// the model served by `llm`.
fn followup_config(dir: &Path, slack: u16, llm: u16, timeout: &str) -> String {
    let url_file = dir.join("slack-url");
    std::fs::write(
        &url_file,
        format!("http://127.0.0.1:{slack}/services/T0/B0/secret\n"),
    )
    .expect("url");
    format!(
        "[notify]\ngroup_wait = \"1s\"\ngroup_interval = \"1m\"\n[[notify.slack]]\nname = \"chat\"\nwebhook_url_file = {:?}\nmin_interval = \"0s\"\n[analysis]\nurl = \"http://127.0.0.1:{llm}/v1\"\nmodel = \"stub-model\"\ntimeout = {timeout:?}\nattach_to = [\"slack\"]\n",
        url_file
    )
}

/// The texts Slack got: Block Kit messages (their blocks' and fallback text) and follow-ups
/// (`text`), in arrival order.
fn slack_texts(s: &analysis_support::Stub) -> Vec<String> {
    s.requests
        .lock()
        .expect("lock")
        .iter()
        .map(|(_, _, body)| body.clone())
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + timeout;
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "{what}: not within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_follow_up_reaches_slack_after_the_alert_it_explains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let slack = stub(Mode::Ok);
    let llm = stub(Mode::Json("FOLLOWUP: a stuck collective.".into()));
    let cfg = followup_config(dir.path(), slack.port, llm.port, "5s");
    let db = analysis_support::play_with(dir.path(), "scenarios/demo.toml", "f", &cfg);
    wait_for("a follow-up", Duration::from_secs(30), || {
        slack_texts(&slack)
            .iter()
            .any(|t| t.contains("Machine-written explanation"))
    });
    let texts = slack_texts(&slack);
    let follow = texts
        .iter()
        .position(|t| t.contains("Machine-written explanation"))
        .expect("follow-up");
    let body: Value = serde_json::from_str(&texts[follow]).expect("json");
    let text = body["text"].as_str().expect("text");
    assert!(text.contains("FOLLOWUP: a stuck collective."), "{text}");
    assert!(text.contains("by model `stub-model`"), "{text}");
    let id: i64 = text
        .split("of alert ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the alert's id");
    // The alert's own message went first.
    let first = texts
        .iter()
        .position(|t| t.contains(&format!("gpuwatch incident {id}`")))
        .expect("the alert's message");
    assert!(
        first < follow,
        "the message at {first}, the follow-up at {follow}"
    );
    // What was sent is stored with the incident.
    let shown = gpuwatch(&[
        "incident",
        &id.to_string(),
        "--show-prompt",
        "--format",
        "json",
        "--db",
    ])
    .arg(&db)
    .output()
    .expect("run");
    let shown: Value = serde_json::from_str(&ok_stdout(&shown)).expect("json");
    assert_eq!(shown["status"], "answered", "{shown}");
    let sent = llm.requests.lock().expect("lock").clone();
    assert!(
        sent.iter()
            .any(|r| serde_json::from_str::<Value>(&r.2).ok() == Some(shown["request"].clone()))
    );
}

#[test]
fn a_hanging_model_delays_no_delivery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let slack = stub(Mode::Ok);
    let llm = stub(Mode::Hang(Duration::from_secs(60)));
    let cfg = followup_config(dir.path(), slack.port, llm.port, "30s");
    let started = std::time::Instant::now();
    let db = analysis_support::play_with(dir.path(), "scenarios/demo.toml", "h", &cfg);
    let played = started.elapsed();
    // Every alert that fired was delivered, while the model had requests hanging.
    let o = gpuwatch(&["alerts", "--format", "json", "--db"])
        .arg(&db)
        .output()
        .expect("run");
    let alerts: Value = serde_json::from_str(&ok_stdout(&o)).expect("json");
    let texts = slack_texts(&slack).join("\n");
    for a in alerts.as_array().expect("alerts") {
        if a["fired_ms"].is_null() {
            continue;
        }
        let id = a["alert_id"].as_i64().expect("id");
        assert!(
            texts.contains(&format!("gpuwatch incident {id}`")),
            "alert {id} ({}) not delivered: {texts}",
            a["rule"]
        );
    }
    assert!(
        !llm.requests.lock().expect("lock").is_empty(),
        "follow-ups were asked for"
    );
    assert!(!texts.contains("Machine-written explanation"), "{texts}");
    assert!(
        played < Duration::from_secs(30),
        "the run took {played:?}: it waited for the model"
    );
}
