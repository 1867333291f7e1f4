//! The disk-full reserve: a full disk caps the file at its size, the oldest samples make room,
//! and the configured bound returns with the space.

use std::time::Instant;

use super::disk_full;
use crate::model::{GpuSample, SampleStatus, TickBatch};
use crate::store::{StoreConfig, open};

fn tick(ts: i64) -> TickBatch {
    TickBatch {
        ts_ms: ts,
        samples: (0..4)
            .map(|g| {
                let mut s = GpuSample::empty(ts, &format!("GPU-{g}"), SampleStatus::Ok);
                s.util_gpu_pct = Some(50);
                s.temp_c = Some(40 + g);
                s
            })
            .collect(),
        ..TickBatch::default()
    }
}

fn oldest_newest(st: &crate::store::Store) -> (i64, i64) {
    st.conn()
        .query_row("SELECT min(ts_ms), max(ts_ms) FROM samples", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
}

#[test]
fn a_full_disk_caps_the_file_sheds_the_oldest_samples_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let mut st = open(&db, &StoreConfig::new("n1")).unwrap();
    st.keep_reserve();
    let reserve = dir.path().join("a.db.reserve");
    assert!(reserve.exists());
    let t0 = 1_700_000_000_000;
    for i in 0..3000 {
        st.write_tick(&tick(t0 + i * 1000)).unwrap();
    }
    // The disk fills up (SQLITE_FULL far below max_db_size).
    assert!(st.disk_full_at_write().unwrap());
    assert!(!reserve.exists(), "the reserve makes the room");
    assert!(disk_full());
    let u = st.usage().unwrap();
    let cap = u.page_count * u.page_size;
    assert_eq!(st.config().max_db_size, cap, "the file is kept at its size");
    let (oldest, _) = oldest_newest(&st);
    // Writing goes on: more ticks than the file held, and the file does not grow.
    for i in 3000..9000 {
        st.write_tick(&tick(t0 + i * 1000)).unwrap();
    }
    let u = st.usage().unwrap();
    assert!(u.page_count * u.page_size <= cap, "{u:?} over {cap}");
    let (oldest_now, newest) = oldest_newest(&st);
    assert!(oldest_now > oldest, "the oldest samples went first");
    assert_eq!(newest, t0 + 8999 * 1000, "the newest tick is there");
    // Not yet time to try again: still full.
    st.disk_space_back().unwrap();
    assert!(disk_full());
    // Space returns.
    if let Some(f) = st.reserve.as_mut().and_then(|r| r.full.as_mut()) {
        f.next_try = Instant::now();
    }
    st.disk_space_back().unwrap();
    assert!(reserve.exists());
    assert!(!disk_full());
    assert_eq!(st.config().max_db_size, 2 << 30);
}
