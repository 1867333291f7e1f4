//! The Slack message of a notification: a Block Kit layout plus the plain-text fallback
//! (`text`, what push notifications and old clients show).
//!
//! Layout: a header (status emoji and [`text::title`]), a context line (sender, reminder or
//! test note), then one section per alert — status, severity and rule; the summary (it
//! carries the values that made the alert fire); host, GPU (index, model, UUID), process or
//! pod ([`text::subject`]); how long ([`text::timing`]); the description; the alert's ID with
//! the command that tells its story. Resolved alerts read differently: a check mark,
//! `RESOLVED` and the severity struck through.
//!
//! Invariants (Slack's limits): at most [`MAX_BLOCKS`] blocks; a section's text at most
//! [`MAX_SECTION_CHARS`] characters, the header's at most [`MAX_HEADER_CHARS`], the fallback
//! at most [`MAX_FALLBACK_CHARS`]; alerts that do not fit are counted in a last line
//! "… and N more alerts". User text is escaped for mrkdwn (`&`, `<`, `>`), so a process name
//! can never mention a channel or forge a link.

use serde_json::{Value, json};

use crate::notify::{AlertMsg, Notification, text};

/// Slack's limit of blocks per message.
pub const MAX_BLOCKS: usize = 50;
/// Slack's limit of a section's text.
pub const MAX_SECTION_CHARS: usize = 3000;
/// Slack's limit of a header's text.
pub const MAX_HEADER_CHARS: usize = 150;
/// The fallback text is kept short: it is a notification preview.
pub const MAX_FALLBACK_CHARS: usize = 3000;

/// The JSON body posted to the webhook.
pub fn payload(n: &Notification) -> Value {
    json!({
        "text": fallback(n),
        "blocks": blocks(n),
        "unfurl_links": false,
        "unfurl_media": false,
    })
}

/// The Block Kit blocks (at most [`MAX_BLOCKS`]).
pub fn blocks(n: &Notification) -> Vec<Value> {
    let mut out = vec![
        json!({
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": fit(&format!("{} {}", title_emoji(n), text::title(n)), MAX_HEADER_CHARS),
                "emoji": true,
            }
        }),
        json!({
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": fit(&context_line(n), MAX_SECTION_CHARS)}],
        }),
    ];
    let room = MAX_BLOCKS - out.len();
    let shown = if n.alerts.len() <= room {
        n.alerts.len()
    } else {
        room - 1
    };
    for a in &n.alerts[..shown] {
        out.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": fit(&alert_mrkdwn(a, n), MAX_SECTION_CHARS)},
        }));
    }
    let rest = &n.alerts[shown..];
    if !rest.is_empty() {
        out.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": more_line(rest)},
        }));
    }
    out
}

/// The plain-text fallback: the title, then one line per alert while they fit in
/// [`MAX_FALLBACK_CHARS`], then "… and N more alerts".
pub fn fallback(n: &Notification) -> String {
    let mut out = text::title(n);
    if n.test {
        out.push_str(&format!(
            " (test message from gpuwatch on {} to receiver \"{}\")",
            n.sender_host, n.receiver
        ));
    } else if n.repeat {
        out.push_str(" (still firing: reminder)");
    }
    // Room kept for the "… and N more alerts" line.
    let budget = MAX_FALLBACK_CHARS.saturating_sub(60);
    for (i, a) in n.alerts.iter().enumerate() {
        let line = format!("\n{}", alert_line(a, n));
        if out.chars().count() + line.chars().count() > budget {
            out.push('\n');
            out.push_str(&more_line(&n.alerts[i..]));
            break;
        }
        out.push_str(&line);
    }
    fit(&out, MAX_FALLBACK_CHARS)
}

/// One alert on one line (the fallback).
fn alert_line(a: &AlertMsg, n: &Notification) -> String {
    let mut line = format!(
        "{} {} [{}] {} — {} — {}",
        if a.is_firing() { "FIRING" } else { "RESOLVED" },
        a.rule,
        a.severity,
        a.summary,
        text::subject(a),
        text::timing(a, n.now_ms)
    );
    if let Some(cmd) = a.story_command() {
        line.push_str(&format!(" — alert {}: {cmd}", a.id));
    }
    fit(&line, 1000)
}

/// One alert's section (mrkdwn).
fn alert_mrkdwn(a: &AlertMsg, n: &Notification) -> String {
    let (status, severity) = if a.is_firing() {
        (
            format!("{} *FIRING*", severity_emoji(&a.severity)),
            format!("*{}*", esc(&a.severity)),
        )
    } else {
        (
            ":white_check_mark: *RESOLVED*".to_string(),
            format!("~{}~", esc(&a.severity)),
        )
    };
    let mut lines = vec![
        format!("{status} · {severity} · `{}`", esc(&a.rule)),
        fit(&esc(&a.summary), 1200),
        esc(&text::subject(a)),
        esc(&text::timing(a, n.now_ms)),
    ];
    if let Some(d) = a.description.as_deref().filter(|d| !d.trim().is_empty()) {
        lines.push(format!("_{}_", fit(&esc(d.trim()), 1200)));
    }
    if let Some(an) = &a.analysis {
        lines.push(format!(":mag: {}", fit(&esc(an), 400)));
    }
    if let Some(cmd) = a.story_command() {
        lines.push(format!("Alert {} · its story: `{cmd}`", a.id));
    }
    lines.join("\n")
}

fn context_line(n: &Notification) -> String {
    let mut line = format!(
        "gpuwatch on *{}* → receiver *{}*",
        esc(&n.sender_host),
        esc(&n.receiver)
    );
    if n.test {
        line.push_str(" · :test_tube: this is a test message");
    } else if n.repeat {
        line.push_str(" · :repeat: still firing (reminder)");
    }
    let (firing, resolved) = (n.firing().count(), n.resolved().count());
    line.push_str(&format!(" · {firing} firing, {resolved} resolved"));
    line
}

fn more_line(rest: &[AlertMsg]) -> String {
    let firing = rest.iter().filter(|a| a.is_firing()).count();
    format!(
        "… and {} more alerts ({firing} firing, {} resolved)",
        rest.len(),
        rest.len() - firing
    )
}

fn title_emoji(n: &Notification) -> &'static str {
    if n.test {
        ":test_tube:"
    } else {
        n.firing()
            .map(|a| a.severity.as_str())
            .max_by_key(|s| text::severity_rank(s))
            .map_or(":white_check_mark:", severity_emoji)
    }
}

fn severity_emoji(severity: &str) -> &'static str {
    match severity {
        "critical" => ":red_circle:",
        "warning" => ":large_orange_circle:",
        _ => ":large_blue_circle:",
    }
}

/// Escapes the three characters Slack's mrkdwn gives a meaning to.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// At most `max` characters: cut with `…`, never inside an `&…;` escape.
pub fn fit(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    if let Some(amp) = cut.rfind('&')
        && !cut[amp..].contains(';')
    {
        cut.truncate(amp);
    }
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(i: usize, firing: bool) -> AlertMsg {
        AlertMsg {
            id: i as i64 + 1,
            state: if firing { "firing" } else { "resolved" }.into(),
            rule: "gpu_idle".into(),
            severity: "warning".into(),
            summary: format!("util 0% for 30m <@here> & {}", "x".repeat(4000)),
            host: "node-1".into(),
            gpu: Some(i as u32),
            starts_ms: 1_000,
            ends_ms: (!firing).then_some(5_000),
            ..Default::default()
        }
    }

    fn section_texts(blocks: &[Value]) -> Vec<String> {
        blocks
            .iter()
            .filter(|b| b["type"] == "section")
            .map(|b| b["text"]["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn many_alerts_fit_slacks_limits() {
        let n = Notification {
            digest: None,
            receiver: "r".into(),
            alerts: (0..120).map(|i| alert(i, i < 100)).collect(),
            now_ms: 10_000,
            ..Default::default()
        };
        let b = blocks(&n);
        assert_eq!(b.len(), MAX_BLOCKS);
        let texts = section_texts(&b);
        assert!(texts.iter().all(|t| t.chars().count() <= MAX_SECTION_CHARS));
        let last = texts.last().unwrap();
        assert_eq!(last, "… and 73 more alerts (53 firing, 20 resolved)");
        // Escaped: no raw `<@here>` mention.
        assert!(texts[0].contains("&lt;@here&gt; &amp;"), "{}", texts[0]);
        let f = fallback(&n);
        assert!(f.chars().count() <= MAX_FALLBACK_CHARS);
        assert!(f.contains(" more alerts"), "{f}");
    }

    #[test]
    fn exactly_the_room_shows_every_alert() {
        let n = Notification {
            digest: None,
            alerts: (0..MAX_BLOCKS - 2).map(|i| alert(i, true)).collect(),
            ..Default::default()
        };
        let b = blocks(&n);
        assert_eq!(b.len(), MAX_BLOCKS);
        assert!(!section_texts(&b).iter().any(|t| t.contains("more alerts")));
    }

    #[test]
    fn fit_never_splits_an_escape() {
        assert_eq!(fit("abc", 3), "abc");
        assert_eq!(fit("abcd", 3), "ab…");
        assert_eq!(fit("a&amp;b", 5), "a…");
        assert_eq!(fit("a&amp;bcd", 8), "a&amp;b…");
    }

    #[test]
    fn resolved_looks_different() {
        let n = Notification {
            digest: None,
            alerts: vec![alert(0, false)],
            ..Default::default()
        };
        let b = blocks(&n);
        let header = b[0]["text"]["text"].as_str().unwrap_or_default();
        assert!(
            header.starts_with(":white_check_mark: [RESOLVED:1]"),
            "{header}"
        );
        assert!(section_texts(&b)[0].starts_with(":white_check_mark: *RESOLVED* · ~warning~"));
    }
}
