//! The rule-based analysis of `gpuwatch incident` on the demo's faults and on an NCCL hang
//! across 8 GPUs, each played through the whole daemon on a fixed simulated clock: golden
//! files of the "Analysis" section (tests/golden/analysis/), and the JSON form's facts.

use serde_json::Value;

use crate::analysis_support::{START_MS, analysis_section, golden, gpuwatch, ok_stdout, play};

fn incident_json(db: &std::path::Path, id: i64) -> Value {
    let o = gpuwatch(&["incident", &id.to_string(), "--format", "json", "--db"])
        .arg(db)
        .output()
        .expect("run");
    serde_json::from_str(&ok_stdout(&o)).expect("json")
}

fn incident_text(db: &std::path::Path, id: i64) -> String {
    let o = gpuwatch(&["incident", &id.to_string(), "--db"])
        .arg(db)
        .output()
        .expect("run");
    ok_stdout(&o)
}

/// Every alert of `db`: (id, rule, GPU index).
fn alerts(db: &std::path::Path) -> Vec<(i64, String, Option<i64>)> {
    let o = gpuwatch(&["alerts", "--format", "json", "--db"])
        .arg(db)
        .output()
        .expect("run");
    let v: Value = serde_json::from_str(&ok_stdout(&o)).expect("json");
    let mut out: Vec<(i64, String, Option<i64>)> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|a| {
            (
                a["alert_id"].as_i64().expect("id"),
                a["rule"].as_str().expect("rule").to_string(),
                a["gpu_index"].as_i64(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn demo_faults_have_their_analyses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = play(dir.path(), "scenarios/demo.toml", "demo");
    let all = alerts(&db);
    let rules: Vec<&str> = all.iter().map(|a| a.1.as_str()).collect();
    for want in [
        "gpu_overheating",
        "training_hang",
        "gpu_memory_leak",
        "gpu_xid_error",
        "gpu_idle",
    ] {
        assert!(rules.contains(&want), "{want} missing from {rules:?}");
    }
    for (id, rule, gpu) in &all {
        let text = incident_text(&db, *id);
        let gpu = gpu.map_or("host".to_string(), |g| format!("gpu{g}"));
        golden(&format!("demo-{rule}-{gpu}"), &analysis_section(&text));

        // The JSON carries the same analysis.
        let j = incident_json(&db, *id);
        let a = &j["analysis"];
        assert_eq!(a["alert_id"], *id);
        assert_eq!(a["rule"], rule.as_str());
        let head = a["headline"].as_str().expect("headline");
        assert!(text.contains(head), "{head}");
        let causes = a["causes"].as_array().expect("causes");
        assert!(!causes.is_empty(), "{rule}: no cause in {a}");
        let top = causes[0]["cause"].as_str().expect("cause");
        let expect = match rule.as_str() {
            "training_hang" => "a stuck collective (NCCL hang)",
            "gpu_overheating" => "cooling of this GPU cannot keep up",
            "gpu_memory_leak" => "process 51235 (python) keeps allocating",
            "gpu_xid_error" | "gpu_ecc_uncorrected" => {
                "XID 48: double-bit (uncorrectable) ECC error"
            }
            "gpu_idle" => "a job or notebook that finished or paused",
            other => panic!("the demo raised {other}, which this test does not know"),
        };
        assert!(top.starts_with(expect), "{rule}: top cause {top:?}");
        assert!(
            causes
                .iter()
                .all(|c| !c["next_steps"].as_array().expect("steps").is_empty()),
            "{rule}: every cause has next steps: {a}"
        );
    }

    // The line the sender adds to Slack and email messages: the same headline.
    let conn = gpuwatch::store::open_read_only(&db).expect("db");
    for (id, _, _) in &all {
        let line = gpuwatch::analysis::message_line(&conn, *id).expect("a line");
        let head = incident_json(&db, *id)["analysis"]["headline"]
            .as_str()
            .expect("headline")
            .to_string();
        assert!(line.starts_with("Analysis: "), "{line}");
        assert!(
            line.chars().count() <= gpuwatch::analysis::MESSAGE_LINE_CHARS,
            "{line}"
        );
        let shown = line.trim_start_matches("Analysis: ").trim_end_matches('…');
        assert!(head.starts_with(shown), "{line} vs {head}");
    }
    assert_eq!(gpuwatch::analysis::message_line(&conn, 9999), None);

    // The GPU with the XID 48: its hardware health now (gpuwatch status) fails on the XID
    // (the hardware's, with its action) and names the pending row remap; the hang's GPUs are
    // healthy.
    let ecc = all.iter().find(|a| a.1 == "gpu_xid_error").expect("xid").0;
    let h = incident_json(&db, ecc)["analysis"]["health"].clone();
    assert_eq!(h["status"], "fail", "{h}");
    let codes: Vec<&str> = h["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["code"].as_str().expect("code"))
        .collect();
    assert!(codes.contains(&"row_remap_pending"), "{codes:?}");
    assert_eq!(codes.first(), Some(&"xid_critical"), "{codes:?}");

    // The demo's hang: both ranks of the llama job are one incident, stopped at the same
    // second (28:00), so no rank is named first; the step stopped at 28:00 too.
    let hang = all.iter().find(|a| a.1 == "training_hang").expect("hang").0;
    let a = incident_json(&db, hang)["analysis"].clone();
    assert_eq!(a["health"]["status"], "ok", "{a}");
    let members = a["incident"].as_array().expect("incident");
    assert_eq!(members.len(), 2, "{a}");
    let hang_at = START_MS + 28 * 60_000;
    for m in members {
        assert_eq!(m["pod"], "llama-70b-ft-0", "{m}");
        assert_eq!(m["stopped_ms"].as_i64(), Some(hang_at), "{m}");
    }
    let summary = a["incident_summary"].as_str().expect("summary");
    assert!(summary.contains("no single one stopped first"), "{summary}");
    let stop = a["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["kind"] == "step_stopped")
        .expect("the step stopped");
    assert_eq!(stop["at_ms"].as_i64(), Some(hang_at), "{stop}");

    // The overheating GPU: the thermal clock-event reasons appear at 20:00 and the sweep's
    // evaluation process (04:00–09:00) and XID 13 (08:00) are in the window.
    let hot = all
        .iter()
        .find(|a| a.1 == "gpu_overheating")
        .expect("hot")
        .0;
    let a = incident_json(&db, hot)["analysis"].clone();
    let kinds: Vec<&str> = a["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| c["kind"].as_str().expect("kind"))
        .collect();
    for k in ["throttle", "xid", "process_start", "process_exit"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
}

#[test]
fn an_nccl_hang_on_8_gpus_is_one_incident_that_names_the_first_rank() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = play(dir.path(), "tests/scenarios/nccl-hang-8gpu.toml", "nccl");
    let all = alerts(&db);
    assert_eq!(all.len(), 8, "{all:?}");
    assert!(all.iter().all(|a| a.1 == "training_hang"), "{all:?}");
    // Whichever of the 8 alerts is opened, the incident is the same and GPU 5 is first.
    for (id, _, gpu) in &all {
        let a = incident_json(&db, *id)["analysis"].clone();
        let members = a["incident"].as_array().expect("incident");
        assert_eq!(members.len(), 8, "{a}");
        assert_eq!(members[0]["gpu"], 5, "{a}");
        assert_eq!(members[0]["pod"], "llm-7-worker-2", "{a}");
        assert_eq!(
            members[0]["stopped_ms"].as_i64(),
            Some(START_MS + (19 * 60 + 46) * 1000),
            "{a}"
        );
        for m in &members[1..] {
            assert_eq!(
                m["stopped_ms"].as_i64(),
                Some(START_MS + 20 * 60_000),
                "{m}"
            );
        }
        let summary = a["incident_summary"].as_str().expect("summary");
        assert!(
            summary.contains("all 8 ranks stopped within 14 s")
                && summary
                    .contains("GPU 5 (pod llm-7-worker-2) stopped first, 14 s before the next"),
            "{summary}"
        );
        let top = &a["causes"][0];
        assert!(
            top["cause"]
                .as_str()
                .expect("cause")
                .starts_with("a stuck collective"),
            "{top}"
        );
        assert!(
            top["next_steps"][0]
                .as_str()
                .expect("step")
                .starts_with("check the rank that stopped first: GPU 5 (pod llm-7-worker-2)"),
            "{top}"
        );
        if *gpu == Some(0) {
            golden(
                "nccl-hang-gpu0",
                &analysis_section(&incident_text(&db, *id)),
            );
        }
    }
}

#[test]
fn incidents_say_whose_fault_each_xid_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = play(dir.path(), "scenarios/demo.toml", "demo");
    let mut classes: Vec<(i64, String, String)> = Vec::new();
    for (id, rule, _) in alerts(&db) {
        let j = incident_json(&db, id);
        if rule == "gpu_xid_error" {
            let labels = j["alert"]["labels"].to_string();
            assert!(labels.contains("\"xid_class\":\"hardware\""), "{labels}");
        }
        for e in j["events"].as_array().expect("events") {
            if e["kind"] == "xid" && e["gpu"] == true {
                classes.push((
                    e["code"].as_i64().expect("code"),
                    e["xid_class"].as_str().expect("class").to_string(),
                    e["xid_reason"].as_str().expect("reason").to_string(),
                ));
            }
        }
    }
    // GPU 2's XID 48: the hardware's (the catalogue); GPU 3's XID 13 while its sweep runs
    // on (only the eval process beside it ended): the application's, no crash.
    let of = |code: i64| {
        classes
            .iter()
            .find(|c| c.0 == code)
            .unwrap_or_else(|| panic!("XID {code} in no incident: {classes:?}"))
            .clone()
    };
    let (_, class, reason) = of(48);
    assert_eq!(class, "hardware", "{reason}");
    let (_, class, reason) = of(13);
    assert_eq!(class, "application", "{reason}");
    assert!(reason.contains("usually the application"), "{reason}");
}

/// An XID of an incident: (code, class, reason, count).
type IncidentXid = (i64, String, String, i64);

#[test]
fn incidents_judge_a_crash_a_repeat_and_count_a_storm_as_the_rules_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = play(dir.path(), "tests/scenarios/xid-judged.toml", "xid");
    // (rule, GPU) → the XID events of its incident.
    let mut seen: Vec<(String, Option<i64>, Vec<IncidentXid>)> = Vec::new();
    for (id, rule, gpu) in alerts(&db) {
        let j = incident_json(&db, id);
        let xids = j["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|e| e["kind"] == "xid" && e["gpu"] == true)
            .map(|e| {
                (
                    e["code"].as_i64().expect("code"),
                    e["xid_class"].as_str().expect("class").to_string(),
                    e["xid_reason"].as_str().expect("reason").to_string(),
                    e["count"].as_i64().expect("count"),
                )
            })
            .collect();
        seen.push((rule, gpu, xids));
    }
    let of = |rule: &str, gpu: i64| {
        seen.iter()
            .find(|s| s.0 == rule && s.1 == Some(gpu))
            .unwrap_or_else(|| panic!("{rule} on GPU {gpu}: {seen:?}"))
            .2
            .clone()
    };
    let crash = of("xid_application_crash", 0);
    assert!(
        crash
            .iter()
            .any(|x| x.0 == 31 && x.1 == "application" && x.2.contains("crashed")),
        "{crash:?}"
    );
    let repeat = of("gpu_xid_error", 2);
    let second = repeat.last().expect("the second XID 13");
    assert_eq!(
        (second.0, second.1.as_str()),
        (13, "hardware"),
        "{repeat:?}"
    );
    assert!(second.2.contains("2 different job"), "{repeat:?}");
    let storm = of("gpu_xid_error", 3);
    assert_eq!(
        storm.iter().map(|x| (x.0, x.3)).collect::<Vec<_>>(),
        [(94, 3000)],
        "one run: {storm:?}"
    );
}
