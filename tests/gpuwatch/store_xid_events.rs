//! XIDs in the store: the same XID from NVML's event API and from the kernel log is one row
//! (either order; a burst is one run counted once; a storm is a row per hour); a kernel-log XID finds
//! its GPU by PCI address in the inventory or waits for it; the newest stored XID time that
//! the kernel-log follower starts from.

use std::path::Path;

use gpuwatch::model::{Event, EventSource, GpuInventory, TickBatch};
use gpuwatch::store::events::{XID_RUN_GAP_MS, XID_RUN_SPAN_MS};
use gpuwatch::store::{self, Store, StoreConfig};
use rusqlite::Connection;

const T0: i64 = 1_750_000_000_000;
const UUID: &str = "GPU-19191919-0000-4000-8000-000000000000";

fn open(path: &Path) -> Store {
    let mut st = store::open(path, &StoreConfig::new("node")).unwrap();
    st.write_tick(&TickBatch {
        ts_ms: T0,
        inventory: vec![GpuInventory {
            uuid: UUID.into(),
            index: 0,
            pci_bus_id: Some("00000000:19:00.0".into()),
            ..GpuInventory::default()
        }],
        ..TickBatch::default()
    })
    .unwrap();
    st
}

fn nvml(ts: i64, code: i64) -> Event {
    Event {
        ts_ms: ts,
        gpu_uuid: Some(UUID.into()),
        kind: "xid".into(),
        code: Some(code),
        message: format!("XID {code}"),
        source: Some(EventSource::Nvml),
        ..Event::default()
    }
}

fn kmsg(ts: i64, code: i64, pci: &str, text: &str) -> Event {
    Event {
        ts_ms: ts,
        gpu_uuid: None,
        kind: "xid".into(),
        code: Some(code),
        message: text.into(),
        pci_bus_id: Some(pci.into()),
        source: Some(EventSource::Kmsg),
        kernel_ms: Some(ts - 300),
    }
}

fn write(st: &mut Store, ts: i64, events: Vec<Event>) {
    st.write_tick(&TickBatch {
        ts_ms: ts,
        events,
        ..TickBatch::default()
    })
    .unwrap();
}

/// (code, source, gpu uuid, pci, message, kernel_ms) of every XID row, by id.
type Row = (
    i64,
    String,
    Option<String>,
    Option<String>,
    String,
    Option<i64>,
);

fn rows(path: &Path) -> Vec<Row> {
    let c = Connection::open(path).unwrap();
    let mut s = c
        .prepare(
            "SELECT code, source, gpu_uuid, pci_bus_id, message, kernel_ms FROM gpu_events
             WHERE kind = 'xid' ORDER BY event_id",
        )
        .unwrap();
    s.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn uuid() -> Option<String> {
    Some(UUID.to_string())
}

#[test]
fn nvml_then_kernel_log_is_one_row_with_the_kernel_s_detail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let t = T0 + 60_000;
    write(&mut st, t, vec![nvml(t, 79)]);
    let text =
        "Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.";
    write(
        &mut st,
        t + 1000,
        vec![kmsg(t + 1000, 79, "0000:19:00", text)],
    );
    assert_eq!(
        rows(&path),
        [(
            79,
            "nvml+kmsg".into(),
            uuid(),
            Some("0000:19:00".into()),
            text.into(),
            Some(t + 700)
        )]
    );
}

#[test]
fn kernel_log_then_nvml_in_one_tick_or_two_is_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let t = T0 + 60_000;
    // Same tick: the kernel's report first.
    write(
        &mut st,
        t,
        vec![kmsg(t, 48, "0000:19:00", "Xid 48 text"), nvml(t, 48)],
    );
    // Next ticks: the kernel's first, NVML's 2 s later.
    write(
        &mut st,
        t + 5000,
        vec![kmsg(t + 5000, 94, "0000:19:00", "Xid 94 text")],
    );
    write(&mut st, t + 7000, vec![nvml(t + 7000, 94)]);
    let got = rows(&path);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got.iter().all(|r| r.1 == "nvml+kmsg" && r.2 == uuid()),
        "{got:?}"
    );
    assert_eq!(
        (got[0].4.as_str(), got[1].4.as_str()),
        ("Xid 48 text", "Xid 94 text")
    );
}

/// (code, source, count, first, last, nvml count, kernel count, messages) of every XID run.
type Run = (
    i64,
    String,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

fn runs(path: &Path) -> Vec<Run> {
    let c = Connection::open(path).unwrap();
    let mut s = c
        .prepare(
            "SELECT v.code, v.source, v.count, v.ts_ms, v.last_ms, e.nvml_count, e.kernel_count,
                    v.messages
             FROM gpu_events v JOIN events e ON e.id = v.event_id
             WHERE v.kind = 'xid' ORDER BY v.event_id",
        )
        .unwrap();
    s.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

#[test]
fn a_burst_seen_by_both_sides_is_one_run_counted_once_and_a_quiet_gap_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let t = T0 + 60_000;
    write(
        &mut st,
        t,
        vec![
            kmsg(t, 13, "0000:19:00", "a"),
            kmsg(t, 13, "0000:19:00", "b"),
            kmsg(t, 13, "0000:19:00", "c"),
        ],
    );
    write(
        &mut st,
        t + 1000,
        vec![nvml(t + 1000, 13), nvml(t + 1000, 13)],
    );
    assert_eq!(
        runs(&path),
        [(
            13,
            "nvml+kmsg".into(),
            3,
            t,
            t + 1000,
            Some(2),
            Some(3),
            Some("b\nc".into())
        )],
        "3 events (the larger side's count), the distinct messages kept"
    );
    // Another XID number is another run; the same number within the quiet gap extends the
    // run, after it starts a new one.
    write(&mut st, t + 2000, vec![nvml(t + 2000, 31)]);
    let inside = t + 1000 + XID_RUN_GAP_MS;
    write(&mut st, inside, vec![nvml(inside, 13)]);
    let after = inside + XID_RUN_GAP_MS + 1;
    write(&mut st, after, vec![nvml(after, 13)]);
    let got = runs(&path);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!((got[0].2, got[0].4, got[0].5), (3, inside, Some(3)));
    assert_eq!((got[1].0, got[1].1.as_str(), got[1].2), (31, "nvml", 1));
    assert_eq!((got[2].0, got[2].2, got[2].3), (13, 1, after));
}

#[test]
fn a_storm_is_one_row_per_hour_with_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let t = T0 + 60_000;
    // 12,000 kernel-log XID 95 lines over 10 minutes, 20 per one-second tick.
    for tick in 0..600 {
        let ts = t + tick * 1000;
        let events = (0..20)
            .map(|i| {
                kmsg(
                    ts,
                    95,
                    "0000:19:00",
                    &format!("Xid 95 uncontained, {}", i % 2),
                )
            })
            .collect();
        write(&mut st, ts, events);
    }
    let got = runs(&path);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].2, got[0].3, got[0].4, got[0].6),
        (12_000, t, t + 599_000, Some(12_000))
    );
    assert_eq!(got[0].7.as_deref(), Some("Xid 95 uncontained, 1"));
    // The storm goes on, one line every 30 s, for another hour: it is cut at an hour.
    for k in 1..=120 {
        let ts = t + 599_000 + k * 30_000;
        write(&mut st, ts, vec![kmsg(ts, 95, "0000:19:00", "x")]);
    }
    let got = runs(&path);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].4 - got[0].3 < XID_RUN_SPAN_MS, "{got:?}");
    assert_eq!(got.iter().map(|r| r.2).sum::<i64>(), 12_120);
}

#[test]
fn a_kernel_xid_finds_its_gpu_by_address_or_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let t = T0 + 60_000;
    write(
        &mut st,
        t,
        vec![
            kmsg(t, 79, "0000:19:00", "known"),
            kmsg(t, 79, "0000:3b:00", "not in the inventory"),
        ],
    );
    let got = rows(&path);
    assert_eq!((got[0].2.clone(), got[1].2.clone()), (uuid(), None));
    assert_eq!(got[1].3.as_deref(), Some("0000:3b:00"));
    // A GPU appears at that address (NVML's form): the row joins it.
    let other = "GPU-3b3b3b3b-0000-4000-8000-000000000001";
    st.write_tick(&TickBatch {
        ts_ms: t + 1000,
        inventory: vec![GpuInventory {
            uuid: other.into(),
            index: 1,
            pci_bus_id: Some("00000000:3B:00.0".into()),
            ..GpuInventory::default()
        }],
        ..TickBatch::default()
    })
    .unwrap();
    assert_eq!(rows(&path)[1].2.as_deref(), Some(other));
}

#[test]
fn the_newest_stored_xid_is_read_in_kernel_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    assert_eq!(
        store::events::newest_xid_ms(st.conn(), "node").unwrap(),
        None
    );
    let t = T0 + 60_000;
    write(&mut st, t, vec![kmsg(t, 79, "0000:3b:00", "x")]);
    assert_eq!(
        store::events::newest_xid_ms(st.conn(), "node").unwrap(),
        Some(t - 300),
        "the kernel's time, not the tick's"
    );
    write(&mut st, t + 5000, vec![nvml(t + 5000, 13)]);
    assert_eq!(
        store::events::newest_xid_ms(st.conn(), "node").unwrap(),
        Some(t + 5000)
    );
    assert_eq!(
        store::events::newest_xid_ms(st.conn(), "other").unwrap(),
        None
    );
}
