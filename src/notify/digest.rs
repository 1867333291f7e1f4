//! The usage digest's forms (docs/USAGE.md): Slack text blocks, the email's HTML with a bar
//! chart of the top holders (busy and idle-held GPU-hours), and the outbox rows that carry it
//! to every receiver but Alertmanager (a digest is not an alert).
//!
//! Invariants: every form says the same numbers (the [`DigestMsg`] as queued); the chart
//! draws no text (the table beside it names the bars, in the same order); a digest row is
//! its own group (`usage-digest|…`), sent at once.

use plotters::backend::RGBPixel;
use plotters::prelude::*;
use serde_json::{Value, json};

use crate::config::ReceiverKind;
use crate::store::outbox::NewNotification;
use crate::text::html_escape as esc;
use crate::usage::digest::DigestMsg;

use super::route::Router;

impl Router {
    /// The outbox rows of a digest: one per receiver that is not an Alertmanager.
    pub fn digest_rows(&self, d: &DigestMsg, created_ms: i64) -> Vec<NewNotification> {
        let Ok(payload) = serde_json::to_string(d) else {
            return Vec::new();
        };
        self.receivers()
            .iter()
            .filter(|r| !matches!(r.kind, ReceiverKind::Alertmanager(_)))
            .map(|r| NewNotification {
                receiver: r.name.clone(),
                group_key: format!("usage-digest|to={}", d.to),
                alert: None,
                alert_id: None,
                kind: "digest".into(),
                payload_json: payload.clone(),
                created_ms,
                group_wait_ms: 0,
                group_interval_ms: 0,
                repeat_interval_ms: 0,
            })
            .collect()
    }
}

fn hours(v: f64) -> String {
    format!("{v:.1}")
}

fn share(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{:.0} %", s * 100.0))
}

/// Slack's message: a header, the total, one line per top holder.
pub fn slack(d: &DigestMsg) -> Value {
    let total = &d.total;
    let cost = match (&d.currency, total.idle_cost) {
        (Some(c), Some(v)) => format!(" · idle cost {v:.2} {c}"),
        _ => String::new(),
    };
    let mut lines = String::new();
    for (i, l) in d.top.iter().enumerate() {
        let money = match (&d.currency, l.idle_cost) {
            (Some(c), Some(v)) => format!(" · {v:.2} {c}"),
            _ => String::new(),
        };
        lines.push_str(&format!(
            "{}. *{}*: {} idle of {} GPU-h held ({}), longest idle {}{money}\n",
            i + 1,
            super::slack::blocks::esc(l.holder.as_deref().unwrap_or("-")),
            hours(l.idle_held_hours),
            hours(l.held_hours),
            share(l.idle_share),
            crate::format::duration((l.longest_idle_s * 1000.0) as i64)
        ));
    }
    if lines.is_empty() {
        lines = "No GPU was held idle.".into();
    }
    json!({
        "text": d.title(),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": super::slack::blocks::fit(&format!("GPU usage on {}", d.host), 150)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": format!(
                "{} {} to {}: *{}* idle-held of *{}* GPU-hours held ({}){cost}",
                d.period, &d.from[..10.min(d.from.len())], &d.to[..10.min(d.to.len())],
                hours(total.idle_held_hours), hours(total.held_hours), share(total.idle_share)
            )}},
            {"type": "section", "text": {"type": "mrkdwn", "text": super::slack::blocks::fit(&lines, 2900)}},
        ],
    })
}

/// The email's HTML: a table of the top holders and, when drawn, the chart (`cid`).
pub fn html(d: &DigestMsg, chart_cid: Option<&str>) -> String {
    let money = |v: Option<f64>| match (&d.currency, v) {
        (Some(c), Some(v)) => format!("{v:.2} {}", esc(c)),
        _ => "-".into(),
    };
    let mut rows = String::new();
    for l in &d.top {
        rows.push_str(&format!(
            "<tr><td>{}</td><td align=\"right\">{}</td><td align=\"right\">{}</td><td align=\"right\">{}</td><td align=\"right\">{}</td><td align=\"right\">{}</td></tr>",
            esc(l.holder.as_deref().unwrap_or("-")),
            hours(l.held_hours),
            hours(l.idle_held_hours),
            share(l.idle_share),
            crate::format::duration((l.longest_idle_s * 1000.0) as i64),
            money(l.idle_cost)
        ));
    }
    let chart = chart_cid.map_or(String::new(), |cid| {
        format!(
            "<p><img src=\"cid:{cid}\" alt=\"busy (blue) and idle-held (orange) GPU-hours of each holder, in the table's order\" width=\"{W}\" height=\"{}\"></p>",
            chart_height(d)
        )
    });
    format!(
        "<!doctype html><html><body style=\"font-family:sans-serif\"><h2>{}</h2>\
         <p>{} to {}: <b>{}</b> idle-held of <b>{}</b> GPU-hours held ({}), idle cost {}.</p>{chart}\
         <table cellpadding=\"4\" style=\"border-collapse:collapse\"><tr><th align=\"left\">holder</th><th>held h</th><th>idle h</th><th>idle</th><th>longest idle</th><th>idle cost</th></tr>{rows}</table>\
         <p style=\"color:#6b7280\">gpuwatch usage digest ({}) of {}: idle-held is gpu_idle's test, counted from when the GPU became idle; see docs/USAGE.md.</p></body></html>",
        esc(&d.title()),
        esc(&d.from),
        esc(&d.to),
        hours(d.total.idle_held_hours),
        hours(d.total.held_hours),
        share(d.total.idle_share),
        money(d.total.idle_cost),
        esc(&d.period),
        esc(&d.host),
    )
}

const W: u32 = 600;
const BAR: u32 = 22;

fn chart_height(d: &DigestMsg) -> u32 {
    (d.top.len().max(1) as u32) * BAR + 10
}

/// The chart: one bar per top holder, busy (blue) then idle-held (orange) GPU-hours, as PNG.
pub fn chart_png(d: &DigestMsg) -> Result<Vec<u8>, String> {
    let h = chart_height(d);
    let mut buf = vec![0u8; (W * h * 3) as usize];
    let max = d
        .top
        .iter()
        .map(|l| l.held_hours)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    {
        let backend = BitMapBackend::<RGBPixel>::with_buffer_and_format(&mut buf, (W, h))
            .map_err(|e| e.to_string())?;
        let root = backend.into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let width = f64::from(W - 10);
        for (i, l) in d.top.iter().enumerate() {
            let y = 5 + i as i32 * BAR as i32;
            let busy = (l.busy_hours / max * width) as i32;
            let idle = (l.idle_held_hours / max * width) as i32;
            let x0 = 5;
            root.draw(&Rectangle::new(
                [(x0, y + 3), (x0 + busy, y + BAR as i32 - 3)],
                RGBColor(0x1d, 0x4e, 0xd8).filled(),
            ))
            .map_err(|e| e.to_string())?;
            root.draw(&Rectangle::new(
                [(x0 + busy, y + 3), (x0 + busy + idle, y + BAR as i32 - 3)],
                RGBColor(0xf5, 0x9e, 0x0b).filled(),
            ))
            .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, W, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(|e| e.to_string())?;
    w.write_image_data(&buf).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    Ok(out)
}
