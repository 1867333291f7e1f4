//! The table against the real captures it was built from (../shared/data): every value the
//! table holds for a captured model must be what the capture says.

use super::*;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data");

fn read(rel: &str) -> String {
    let path = format!("{DATA}/{rel}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{path}: {e} (the real captures live in ../shared/data beside the repository)")
    })
}

/// What one capture says about one GPU.
#[derive(Debug, Default)]
struct Seen {
    name: String,
    total_mib: Option<u64>,
    reserved_mib: Option<u32>,
    power_w: Option<u32>,
    shutdown: Option<u32>,
    slowdown: Option<u32>,
    max_op: Option<u32>,
    /// current temperature + T.Limit margin, one per reading.
    tlimits: Vec<u32>,
    shutdown_tlimit: Option<i64>,
    slowdown_tlimit: Option<i64>,
}

fn num(v: &str) -> Option<f64> {
    v.split_whitespace().next()?.parse().ok()
}

/// `nvidia-smi -q` text: one [`Seen`] per `Product Name`.
fn parse_q(text: &str) -> Vec<Seen> {
    let mut out: Vec<Seen> = Vec::new();
    let (mut in_fb, mut temp) = (false, None);
    for line in text.lines() {
        let Some((k, v)) = line.split_once(" : ") else {
            in_fb |= line.trim() == "FB Memory Usage";
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "Product Name" {
            out.push(Seen {
                name: v.to_string(),
                ..Seen::default()
            });
            continue;
        }
        let Some(g) = out.last_mut() else { continue };
        let n = num(v);
        match k {
            "Total" if in_fb => g.total_mib = g.total_mib.or(n.map(|x| x as u64)),
            "Reserved" if in_fb => {
                g.reserved_mib = g.reserved_mib.or(n.map(|x| x as u32));
                in_fb = false;
            }
            "Default Power Limit" => g.power_w = g.power_w.or(n.map(|x| x.round() as u32)),
            "GPU Shutdown Temp" => g.shutdown = n.map(|x| x as u32),
            "GPU Slowdown Temp" => g.slowdown = n.map(|x| x as u32),
            "GPU Max Operating Temp" => g.max_op = n.map(|x| x as u32),
            "GPU Current Temp" => temp = n,
            "GPU T.Limit Temp" => {
                if let (Some(t), Some(m)) = (temp, n) {
                    g.tlimits.push((t + m) as u32);
                }
            }
            "GPU Shutdown T.Limit Temp" => g.shutdown_tlimit = n.map(|x| x as i64),
            "GPU Slowdown T.Limit Temp" => g.slowdown_tlimit = n.map(|x| x as i64),
            _ => {}
        }
    }
    out
}

/// `nvidia-smi -q -x` (one GPU per file).
fn parse_xml(text: &str) -> Seen {
    let tag = |t: &str| -> Option<&str> {
        let open = format!("<{t}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find('<')? + start;
        Some(text[start..end].trim())
    };
    let n = |t: &str| tag(t).and_then(num);
    let mut s = Seen {
        name: tag("product_name").unwrap_or_default().to_string(),
        total_mib: n("total").map(|x| x as u64),
        reserved_mib: n("reserved").map(|x| x as u32),
        power_w: n("default_power_limit").map(|x| x.round() as u32),
        shutdown: n("gpu_temp_max_threshold").map(|x| x as u32),
        slowdown: n("gpu_temp_slow_threshold").map(|x| x as u32),
        max_op: n("gpu_temp_max_gpu_threshold").map(|x| x as u32),
        shutdown_tlimit: n("gpu_temp_max_tlimit_threshold").map(|x| x as i64),
        slowdown_tlimit: n("gpu_temp_slow_tlimit_threshold").map(|x| x as i64),
        ..Seen::default()
    };
    if let (Some(t), Some(m)) = (n("gpu_temp"), n("gpu_temp_tlimit")) {
        s.tlimits.push((t + m) as u32);
    }
    s
}

/// The most frequent value (the smaller one on a tie).
fn mode(v: &[u32]) -> Option<u32> {
    let mut best: Option<(usize, u32)> = None;
    for &x in v {
        let c = v.iter().filter(|&&y| y == x).count();
        if best.is_none_or(|(bc, bx)| c > bc || (c == bc && x < bx)) {
            best = Some((c, x));
        }
    }
    best.map(|(_, x)| x)
}

fn check(seen: &Seen, from: &str) {
    let m =
        lookup(&seen.name).unwrap_or_else(|| panic!("{from}: `{}` not in the table", seen.name));
    let same = |what: &str, table: Option<u64>, capture: Option<u64>| {
        if let (Some(t), Some(c)) = (table, capture) {
            assert_eq!(t, c, "{from}: {} {what}", m.name);
        }
    };
    same("memory total", m.memory_total_mib, seen.total_mib);
    // The reservation differs between drivers (551 MiB on 535, 479 MiB on 590 for the H100):
    // the table keeps the largest seen.
    if let (Some(t), Some(c)) = (m.reserved_mib, seen.reserved_mib) {
        assert!(
            t >= c,
            "{from}: {} reserved {c} MiB above the table's {t}",
            m.name
        );
    }
    same(
        "default power",
        m.power_default_w.map(u64::from),
        seen.power_w.map(u64::from),
    );
    if seen.tlimits.is_empty() {
        same(
            "shutdown",
            m.temp_shutdown_c.map(u64::from),
            seen.shutdown.map(u64::from),
        );
        same(
            "slowdown",
            m.temp_slowdown_c.map(u64::from),
            seen.slowdown.map(u64::from),
        );
        same(
            "max operating",
            m.temp_max_c.map(u64::from),
            seen.max_op.map(u64::from),
        );
    } else {
        let t = mode(&seen.tlimits).map(u64::from);
        assert!(
            seen.tlimits
                .iter()
                .all(|&x| x.abs_diff(m.temp_max_c.unwrap_or(0)) <= 2),
            "{from}: T.Limit readings {:?} vs the table's {:?}",
            seen.tlimits,
            m.temp_max_c
        );
        if seen.tlimits.len() >= 3 {
            same("T.Limit", m.temp_max_c.map(u64::from), t);
        }
        assert_eq!(
            seen.slowdown_tlimit,
            Some(-i64::from(SLOWDOWN_ABOVE_TLIMIT_C)),
            "{from}: slowdown on the T.Limit scale"
        );
        same(
            "shutdown above T.Limit",
            m.shutdown_above_tlimit_c.map(u64::from),
            seen.shutdown_tlimit.map(|x| (-x) as u64),
        );
    }
}

#[test]
fn the_table_agrees_with_every_q_capture() {
    for f in [
        "gpud-xid-dmesg-and-smi-q/nvidia-smi-q.535.183.01.8xH100.txt",
        "gpud-xid-dmesg-and-smi-q/nvidia-smi-q.535.154.05.8xRTX4090.txt",
        "gpud-xid-dmesg-and-smi-q/nvidia-smi-q.535.129.03.A10.rowremap-pending.txt",
        "gpud-xid-dmesg-and-smi-q/nvidia-smi-q.560.35.03.TITANV.txt",
        "nvidia-smi-captures-multiformat/linux-x86_64__nvidia-h200__590.48.01.txt",
        "nvidia-smi-captures-multiformat/linux-x86_64__nvidia-l40s__595.80.txt",
        "nvidia-smi-captures-multiformat/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
    ] {
        let gpus = parse_q(&read(f));
        assert!(!gpus.is_empty(), "{f}: no GPU found");
        // A file holding several GPUs of one model: T.Limit is judged over all of them.
        let mut all = Seen {
            name: gpus[0].name.clone(),
            ..Seen::default()
        };
        for g in &gpus {
            assert_eq!(g.name, all.name, "{f}: one model per file");
            all.tlimits.extend(&g.tlimits);
        }
        let first = &gpus[0];
        all.total_mib = first.total_mib;
        all.reserved_mib = first.reserved_mib;
        all.power_w = first.power_w;
        all.shutdown = first.shutdown;
        all.slowdown = first.slowdown;
        all.max_op = first.max_op;
        all.shutdown_tlimit = first.shutdown_tlimit;
        all.slowdown_tlimit = first.slowdown_tlimit;
        check(&all, f);
    }
}

#[test]
fn the_table_agrees_with_every_xml_capture() {
    for f in [
        "a10g.xml",
        "a100-sxm4-v12.xml",
        "tesla-t4.xml",
        "rtx-3060-v12.xml",
        "rtx-3080-v13.xml",
        "rtx-3090-v12.xml",
        "rtx-4000-sff-ada-v13.xml",
        "quadro-p2000-v12.xml",
    ] {
        let path = format!("telegraf-nvidia-smi-q-xml/{f}");
        let mut seen = parse_xml(&read(&path));
        if f.starts_with("a100") {
            // A MIG capture: the first memory block is a MIG instance's.
            seen.total_mib = None;
            seen.reserved_mib = None;
            seen.power_w = None;
        }
        check(&seen, &path);
    }
}

#[test]
fn names_are_matched_on_their_words() {
    let name = |n: &str| lookup(n).map(|m| m.name);
    assert_eq!(name("NVIDIA H100 80GB HBM3"), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(name("nvidia h100 80gb hbm3"), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(name("NVIDIA H100 PCIe"), None, "another board");
    assert_eq!(name("NVIDIA H100 NVL"), None);
    assert_eq!(name("NVIDIA A10"), Some("NVIDIA A10"));
    assert_eq!(name("NVIDIA A10G"), Some("NVIDIA A10G"));
    assert_eq!(name("NVIDIA A100-SXM4-80GB"), Some("NVIDIA A100-SXM4-80GB"));
    assert_eq!(name("NVIDIA A100-SXM4-40GB"), Some("NVIDIA A100-SXM4-40GB"));
    assert_eq!(name("Tesla T4"), Some("Tesla T4"));
    assert_eq!(
        name("NVIDIA GeForce RTX 4090"),
        Some("NVIDIA GeForce RTX 4090")
    );
    assert_eq!(name("NVIDIA L40"), None, "not the L40S");
    assert_eq!(name("NVIDIA B200"), None);
    assert_eq!(name(""), None);
    let h100 = lookup("NVIDIA H100 80GB HBM3").expect("H100");
    assert_eq!(h100.short(), "H100 80GB HBM3");
    assert_eq!(
        (h100.temp_slowdown_c, h100.temp_shutdown_c),
        (Some(88), Some(94))
    );
    assert_eq!(
        lookup("NVIDIA GeForce RTX 4090").expect("4090").short(),
        "RTX 4090"
    );
    assert_eq!(largest_reserved_mib(), 614);
}

#[test]
fn every_entry_says_where_it_comes_from() {
    for m in MODELS {
        assert!(!m.source.is_empty(), "{}", m.name);
        assert_eq!(
            lookup(m.name).map(|x| x.name),
            Some(m.name),
            "{} finds itself",
            m.name
        );
        if let (Some(s), Some(d)) = (m.temp_shutdown_c, m.temp_slowdown_c) {
            assert!(s > d, "{}: shutdown above slowdown", m.name);
        }
    }
}
