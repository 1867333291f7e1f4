//! Store round trips: NULLs and zeros, process identity, events, errors, training points,
//! lost GPUs, the read-only connection and the writer thread.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use gpuwatch::model::{
    Event, GpuSample, MetricError, Placement, ProcessInfo, ProcessSample, SampleStatus, TickBatch,
    TrainingPoint,
};
use gpuwatch::store::{self, StoreConfig, StoreError, WriterHandle, history, read, synth::TickGen};

const T0: i64 = 1_750_000_000_000;

fn open(path: &Path) -> store::Store {
    store::open(path, &StoreConfig::new("node-1")).unwrap()
}

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn nulls_stay_null_and_zeros_stay_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let tg = TickGen::new(1, 0);
    let uuid = tg.uuid(0);
    let mut zero = GpuSample::empty(T0, &uuid, SampleStatus::Ok);
    zero.util_gpu_pct = Some(0);
    zero.mem_used_bytes = Some(0);
    zero.power_mw = Some(0);
    zero.throttle_reasons = Some(0);
    zero.remap_pending = Some(false);
    zero.ecc_uncorrected = Some(0);
    let mut full = GpuSample::empty(T0 + 1000, &uuid, SampleStatus::Ok);
    full.util_gpu_pct = Some(100);
    full.mem_used_bytes = Some(81_559_453_696);
    full.throttle_reasons = Some(u64::MAX); // all bits survive the i64 round trip
    full.energy_mj = Some(u64::MAX); // saturates
    full.remap_pending = Some(true);
    let null = GpuSample::empty(T0 + 2000, &uuid, SampleStatus::DeadlineMissed);
    let batch = TickBatch {
        ts_ms: T0 + 2000,
        inventory: tg.inventory(),
        samples: vec![zero.clone(), full.clone(), null.clone()],
        ..Default::default()
    };
    let stats = st.write_tick(&batch).unwrap();
    assert_eq!(stats.rows, 4);
    drop(st);
    // Another host's GPU in the same range: the host's GPU ids keep it out below.
    let mut other = store::open(&path, &StoreConfig::new("node-2")).unwrap();
    let mut foreign = GpuSample::empty(T0 + 1000, "GPU-node-2", SampleStatus::Ok);
    foreign.util_gpu_pct = Some(55);
    foreign.power_mw = Some(120_000);
    other
        .write_tick(&TickBatch {
            ts_ms: T0 + 1000,
            samples: vec![foreign],
            ..Default::default()
        })
        .unwrap();
    drop(other);

    let ro = store::open_read_only(&path).unwrap();
    let uuids: HashMap<i64, String> = history::gpus(&ro, Some("node-1"))
        .unwrap()
        .into_iter()
        .map(|g| (g.gpu_id, g.inventory.uuid))
        .collect();
    assert_eq!(uuids.len(), 1);
    // Every sample column survives the round trip; `history::samples` leaves the uuid empty
    // (rows carry the gpu id), so it is filled from the host's GPUs.
    let all = history::samples(&ro, T0 - 1, T0 + 2999).unwrap();
    assert_eq!(all.len(), 4, "both hosts' samples are in the range");
    let got: Vec<GpuSample> = all
        .into_iter()
        .filter_map(|(gpu_id, mut s)| {
            assert!(s.uuid.is_empty());
            s.uuid = uuids.get(&gpu_id)?.clone();
            Some(s)
        })
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], zero);
    let mut expected_full = full.clone();
    expected_full.energy_mj = Some(i64::MAX as u64);
    assert_eq!(got[1], expected_full);
    assert_eq!(got[2], null);
    // NULL in SQL, not 0.
    let nulls = count(
        &ro,
        "SELECT count(*) FROM samples WHERE util_gpu_pct IS NULL AND power_mw IS NULL",
    );
    assert_eq!(nulls, 1);
    let zeros = count(
        &ro,
        "SELECT count(*) FROM gpu_samples WHERE util_gpu_pct = 0",
    );
    assert_eq!(zeros, 1);
}

fn proc_sample(ts: i64, uuid: &str, pid: u32, start: i64, mem: Option<u64>) -> ProcessSample {
    ProcessSample {
        ts_ms: ts,
        gpu_uuid: uuid.into(),
        process: ProcessInfo {
            pid,
            start_time_ms: start,
            name: Some("python".into()),
            cmdline: Some("python train.py".into()),
            user: Some("bob".into()),
            placement: None,
        },
        used_mem_bytes: mem,
    }
}

/// Many process samples in one batch come back row for row: a key given twice keeps its later
/// row, and unknown memory stays NULL.
#[test]
fn many_process_samples_in_one_batch_come_back_row_for_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let mut tg = TickGen::new(4, 0);
    let mut b = tg.tick(T0);
    let mut want = std::collections::BTreeMap::new();
    for i in 0..36u32 {
        let uuid = tg.uuid((i % 4) as usize);
        let mem = (i % 5 != 0).then_some(u64::from(i) << 20);
        b.processes
            .push(proc_sample(T0, &uuid, 1000 + i, T0 - 9000, mem));
        want.insert((uuid, 1000 + i), mem.map(|m| m as i64));
    }
    // Process 1003 on its GPU again, twice later in the batch: the last row stays.
    let again = tg.uuid(3);
    b.processes
        .insert(20, proc_sample(T0, &again, 1003, T0 - 9000, Some(7 << 20)));
    b.processes
        .push(proc_sample(T0, &again, 1003, T0 - 9000, Some(9 << 20)));
    want.insert((again, 1003), Some(9 << 20));
    assert_eq!(b.processes.len(), 38);
    st.write_tick(&b).unwrap();

    let conn = st.conn();
    let mut stmt = conn
        .prepare(
            "SELECT g.uuid, p.pid, s.used_mem_bytes FROM process_samples s
             JOIN gpus g ON g.id = s.gpu_id JOIN processes p ON p.id = s.process_id
             WHERE s.ts_ms = ?1",
        )
        .unwrap();
    let got: std::collections::BTreeMap<(String, u32), Option<i64>> = stmt
        .query_map([T0], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, want);
    assert_eq!(count(conn, "SELECT count(*) FROM process_samples"), 36);
    assert_eq!(count(conn, "SELECT count(*) FROM processes"), 36);
}

#[test]
fn same_pid_with_another_start_time_is_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let mut tg = TickGen::new(1, 0);
    let uuid = tg.uuid(0);
    let mut b = tg.tick(T0);
    b.processes = vec![proc_sample(T0, &uuid, 42, T0 - 5000, Some(1 << 30))];
    st.write_tick(&b).unwrap();
    let mut b = tg.tick(T0 + 1000);
    b.processes = vec![proc_sample(T0 + 1000, &uuid, 42, T0 - 5000, Some(2 << 30))];
    st.write_tick(&b).unwrap();
    let mut b = tg.tick(T0 + 2000);
    b.processes = vec![proc_sample(T0 + 2000, &uuid, 42, T0 + 1500, None)];
    st.write_tick(&b).unwrap();

    let conn = st.conn();
    assert_eq!(
        count(conn, "SELECT count(*) FROM processes WHERE pid = 42"),
        2
    );
    assert_eq!(count(conn, "SELECT count(*) FROM process_samples"), 3);
    assert_eq!(
        count(
            conn,
            "SELECT count(DISTINCT process_id) FROM gpu_processes WHERE pid = 42"
        ),
        2
    );
    // Reopening (empty caches) finds the same identities.
    drop(st);
    let mut st = open(&path);
    let mut b = tg.tick(T0 + 3000);
    b.processes = vec![proc_sample(T0 + 3000, &uuid, 42, T0 + 1500, Some(0))];
    st.write_tick(&b).unwrap();
    assert_eq!(count(st.conn(), "SELECT count(*) FROM processes"), 2);

    let rows = read::latest_per_gpu(st.conn(), None, T0 + 4000).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].age_ms, Some(1000));
    assert_eq!(rows[0].processes.len(), 1);
    assert_eq!(rows[0].processes[0].start_time_ms, T0 + 1500);
    assert_eq!(rows[0].processes[0].used_mem_bytes, Some(0));
}

#[test]
fn placements_are_stored_read_back_and_unknown_stays_null() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = open(&dir.path().join("g.db"));
    let mut tg = TickGen::new(1, 0);
    let uuid = tg.uuid(0);
    let placed = Placement {
        runtime: Some("containerd".into()),
        container_id: Some("ab".repeat(32)),
        pod_uid: Some("7c1e6a4e-2c4b-4d3e-9f1a-0b2c3d4e5f60".into()),
        pod: Some("llm-ft-7".into()),
        namespace: Some("research".into()),
        container: Some("trainer".into()),
        ..Placement::default()
    };
    let job = Placement {
        slurm_job: Some(4242),
        slurm_step: Some("0".into()),
        slurm_job_name: Some("llama".into()),
        ..Placement::default()
    };
    let mut b = tg.tick(T0);
    let mut procs = vec![
        proc_sample(T0, &uuid, 1, T0 - 10, Some(1)),
        proc_sample(T0, &uuid, 2, T0 - 10, Some(1)),
        proc_sample(T0, &uuid, 3, T0 - 10, Some(1)),
    ];
    procs[0].process.placement = Some(std::sync::Arc::new(placed.clone()));
    procs[1].process.placement = Some(std::sync::Arc::new(job.clone()));
    b.processes = procs;
    st.write_tick(&b).unwrap();

    let rows = read::latest_per_gpu(st.conn(), None, T0 + 1000).unwrap();
    let got: Vec<_> = rows[0]
        .processes
        .iter()
        .map(|p| p.placement.clone())
        .collect();
    assert_eq!(got, vec![Some(placed), Some(job), None]);
    let pod = rows[0]
        .pod()
        .expect("the one pod among the GPU's processes holds it");
    assert_eq!(
        (pod.pod, pod.namespace, pod.container),
        ("llm-ft-7", "research", Some("trainer"))
    );
    let conn = st.conn();
    let view = |sql: &str| count(conn, sql);
    assert_eq!(
        view(
            "SELECT count(*) FROM gpu_processes WHERE pod = 'llm-ft-7' AND namespace = 'research' AND container = 'trainer' AND runtime = 'containerd' AND length(container_id) = 64"
        ),
        1
    );
    assert_eq!(
        view("SELECT count(*) FROM gpu_processes WHERE slurm_job = 4242 AND slurm_step = '0'"),
        1
    );
    assert_eq!(
        view("SELECT count(*) FROM gpu_processes WHERE placement_known IS NULL AND pod IS NULL"),
        1,
        "the unplaced process is unknown, not on the host"
    );
}

#[test]
fn events_errors_training_and_lost_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = open(&path);
    let mut tg = TickGen::new(2, 1);
    let (u0, u1) = (tg.uuid(0), tg.uuid(1));
    let mut b = tg.tick(T0);
    b.events.push(Event {
        ts_ms: T0,
        gpu_uuid: Some(u1.clone()),
        kind: "xid".into(),
        code: Some(79),
        message: "GPU has fallen off the bus".into(),
        ..Event::default()
    });
    b.events.push(Event {
        ts_ms: T0,
        gpu_uuid: None,
        kind: "sampler_error".into(),
        code: None,
        message: "x".into(),
        ..Event::default()
    });
    b.errors.push(MetricError {
        gpu_uuid: u0.clone(),
        metric: "fan_pct".into(),
        error: "NotSupported".into(),
        count: 1,
        first_ms: T0,
        last_ms: T0,
    });
    b.training.push(TrainingPoint {
        ts_ms: T0,
        name: "training_step".into(),
        labels: vec![("rank".into(), "0".into()), ("job".into(), "llm".into())],
        value: 7.0,
    });
    st.write_tick(&b).unwrap();
    // GPU 1 is lost from T0+1000 on; the error counter moves on.
    for k in 1..4 {
        let ts = T0 + k * 1000;
        let mut b = tg.tick(ts);
        b.samples[1] = GpuSample::empty(ts, &u1, SampleStatus::Lost);
        b.processes.truncate(1);
        b.errors.push(MetricError {
            gpu_uuid: u0.clone(),
            metric: "fan_pct".into(),
            error: "NotSupported".into(),
            count: 1 + k as u64,
            first_ms: T0,
            last_ms: ts,
        });
        st.write_tick(&b).unwrap();
    }
    let ro = store::open_read_only(&path).unwrap();
    let rows = read::latest_per_gpu(&ro, Some("node-1"), T0 + 3000).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].lost_at_ms, None);
    assert_eq!(rows[1].lost_at_ms, Some(T0 + 1000));
    assert_eq!(rows[1].latest.as_ref().unwrap().status, SampleStatus::Lost);
    assert!(rows[1].processes.is_empty());
    assert!(rows[0].inventory_known);
    assert_eq!(
        rows[0].inventory.name.as_deref(),
        Some("NVIDIA H100 80GB HBM3")
    );
    assert!(
        read::latest_per_gpu(&ro, Some("elsewhere"), 0)
            .unwrap()
            .is_empty()
    );

    let errs = read::metric_error_summary(&ro, None).unwrap();
    assert_eq!(errs.len(), 1);
    assert_eq!((errs[0].error.count, errs[0].error.last_ms), (4, T0 + 3000));
    assert_eq!(errs[0].gpu_index, Some(0));
    assert_eq!(read::last_sample_ts(&ro, None).unwrap(), Some(T0 + 3000));
    assert_eq!(read::last_sample_ts(&ro, Some("nobody")).unwrap(), None);

    let (kind, code, idx): (String, i64, i64) = ro
        .query_row(
            "SELECT kind, code, gpu_index FROM gpu_events WHERE gpu_uuid IS NOT NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((kind.as_str(), code, idx), ("xid", 79, 1));
    assert_eq!(count(&ro, "SELECT count(*) FROM gpu_events"), 2);
    let labels: String = ro
        .query_row("SELECT labels_json FROM training_points", [], |r| r.get(0))
        .unwrap();
    assert_eq!(labels, r#"{"job":"llm","rank":"0"}"#);

    // A recovered GPU clears the lost mark; an old sample written later does not.
    let mut b = tg.tick(T0 + 4000);
    b.samples[1].status = SampleStatus::Ok;
    st.write_tick(&b).unwrap();
    let mut b = tg.tick(T0 + 1500);
    b.samples[1] = GpuSample::empty(T0 + 1500, &u1, SampleStatus::Lost);
    st.write_tick(&b).unwrap();
    let rows = read::latest_per_gpu(&ro, None, T0 + 5000).unwrap();
    assert_eq!(rows[1].lost_at_ms, None);
    assert_eq!(rows[1].latest.as_ref().unwrap().ts_ms, T0 + 4000);
}

#[test]
fn sample_before_inventory_gets_a_bare_gpu_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = open(&dir.path().join("g.db"));
    let mut b = TickBatch {
        ts_ms: T0,
        ..Default::default()
    };
    b.samples
        .push(GpuSample::empty(T0, "GPU-x", SampleStatus::Ok));
    st.write_tick(&b).unwrap();
    let rows = read::latest_per_gpu(st.conn(), None, T0).unwrap();
    assert!(!rows[0].inventory_known);
    assert_eq!(rows[0].inventory.uuid, "GPU-x");
    // The inventory arriving later fills the same row.
    let mut inv = TickGen::new(1, 0).inventory();
    inv[0].uuid = "GPU-x".into();
    inv[0].index = 3;
    st.write_tick(&TickBatch {
        ts_ms: T0 + 1000,
        inventory: inv,
        ..Default::default()
    })
    .unwrap();
    let rows = read::latest_per_gpu(st.conn(), None, T0).unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].inventory_known);
    assert_eq!(rows[0].inventory.index, 3);
    assert_eq!(rows[0].first_seen_ms, T0);
}

#[test]
fn open_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("nope").join("g.db");
    let err = store::open(&missing_dir, &StoreConfig::new("h")).unwrap_err();
    assert!(matches!(err, StoreError::MissingParent(_)), "{err}");
    let err = store::open_read_only(&dir.path().join("absent.db")).unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    assert!(err.to_string().contains("absent.db"));
    let mut cfg = StoreConfig::new("h");
    cfg.max_db_size = 1000;
    let err = store::open(&dir.path().join("g.db"), &cfg).unwrap_err();
    assert!(matches!(err, StoreError::Config(_)), "{err}");

    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE x (y)")
        .unwrap();
    let err = store::open(&foreign, &StoreConfig::new("h")).unwrap_err();
    assert!(matches!(err, StoreError::NotGpuwatch { .. }), "{err}");
}

#[test]
fn writer_thread_writes_flushes_and_shuts_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let handle = WriterHandle::spawn_with_capacity(open(&path), 256).unwrap();
    let mut tg = TickGen::new(8, 4);
    for k in 0..100 {
        handle
            .send_tick(tg.tick(T0 + k * 1000), Duration::ZERO)
            .unwrap();
    }
    let s = handle.flush().unwrap();
    assert_eq!(s.ticks_written, 100);
    assert_eq!(s.write_errors, 0);
    assert_eq!(s.last_tick_ms, Some(T0 + 99_000));
    let ro = store::open_read_only(&path).unwrap();
    assert_eq!(count(&ro, "SELECT count(*) FROM samples"), 800);
    assert_eq!(count(&ro, "SELECT count(*) FROM process_samples"), 3200);
    // Readers do not block the writer: keep a read transaction open while it writes.
    let reader = store::open_read_only(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM samples"), 800);
    for k in 100..110 {
        handle
            .send_tick(tg.tick(T0 + k * 1000), Duration::ZERO)
            .unwrap();
    }
    let s = handle.flush().unwrap();
    assert_eq!(s.ticks_written, 110);
    assert_eq!(count(&reader, "SELECT count(*) FROM samples"), 800); // its snapshot
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM samples"), 880);
    let fin = handle.shutdown();
    assert_eq!(fin.ticks_written, 110);
    assert_eq!(fin.dropped_batches, 0);
}

#[test]
fn writer_thread_counts_a_full_queue_instead_of_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let st = open(&path);
    // Hold the write lock from another connection so the writer stalls on its first tick.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let handle = WriterHandle::spawn_with_capacity(st, 2).unwrap();
    let mut tg = TickGen::new(1, 0);
    let mut refused = 0;
    for k in 0..10 {
        if handle
            .send_tick(tg.tick(T0 + k * 1000), Duration::ZERO)
            .is_err()
        {
            refused += 1;
        }
    }
    assert!(refused >= 7, "refused {refused}");
    assert_eq!(handle.stats().dropped_batches, refused);
    blocker.execute_batch("COMMIT").unwrap();
    let s = handle.flush().unwrap();
    assert_eq!(s.ticks_written + s.write_errors + s.dropped_batches, 10);
}

/// Another process holding the write lock past the busy timeout (an import publishing a long
/// log) delays the daemon's ticks; it does not lose them.
#[test]
fn the_writer_waits_out_a_long_foreign_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let writer = WriterHandle::spawn(open(&path)).unwrap();
    let mut ticks = TickGen::new(2, 1);
    writer
        .send_tick(ticks.tick(T0), Duration::from_secs(1))
        .unwrap();
    writer.flush().unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    for i in 1..=3 {
        writer
            .send_tick(ticks.tick(T0 + i * 1000), Duration::from_secs(1))
            .unwrap();
    }
    // Longer than the 5 s busy timeout.
    std::thread::sleep(Duration::from_secs(7));
    other.execute_batch("COMMIT").unwrap();
    let stats = writer.flush().unwrap();
    assert_eq!(stats.write_errors, 0, "{:?}", stats.last_error);
    assert_eq!(stats.ticks_written, 4);
    assert_eq!(writer.committed().get(), Some(T0 + 3000));
}

/// Held ticks written in one transaction leave each GPU's row (`lost_at_ms`, `last_sample_ms`,
/// `last_seen_ms`) and the host's span as the same ticks written one transaction each: a run
/// of `ok` samples is written as its newest, every other status in its place, and a sample
/// older than the GPU's newest (an import's) changes nothing.
#[test]
fn held_ticks_in_one_transaction_leave_the_gpus_as_ticks_one_by_one() {
    use SampleStatus::{DeadlineMissed as M, Lost as L, Ok as K};
    // (seconds after T0, the status of GPU 0, of GPU 1); the last two are older than the rest.
    let ticks: [(i64, SampleStatus, SampleStatus); 9] = [
        (1, K, K),
        (2, K, L),
        (3, L, K),
        (4, L, M),
        (5, K, K),
        (6, K, L),
        (7, M, L),
        (-5, L, K),
        (-4, K, L),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (one_by_one, together) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let batches: Vec<TickBatch> = {
        let mut tg = TickGen::new(2, 1);
        let uuids = [tg.uuid(0), tg.uuid(1)];
        ticks
            .iter()
            .map(|&(s, a, b)| {
                let ts = T0 + s * 1000;
                let mut batch = tg.tick(ts);
                for (i, status) in [a, b].into_iter().enumerate() {
                    if status != K {
                        batch.samples[i] = GpuSample::empty(ts, &uuids[i], status);
                    }
                }
                batch
            })
            .collect()
    };
    let mut a = open(&one_by_one);
    for b in &batches {
        a.write_ticks(std::slice::from_ref(b)).unwrap();
    }
    drop(a);
    let mut b = open(&together);
    // The first tick alone (the inventory), then the others held together.
    b.write_ticks(&batches[..1]).unwrap();
    b.write_ticks(&batches[1..]).unwrap();
    drop(b);
    type Row = (String, Option<i64>, Option<i64>, Option<i64>);
    let rows = |p: &Path| -> Vec<Row> {
        let c = store::open_read_only(p).unwrap();
        let mut rows: Vec<_> = c
            .prepare(
                "SELECT uuid, lost_at_ms, last_sample_ms, last_seen_ms FROM gpus
                 UNION ALL SELECT name, first_seen_ms, raw_floor_ms, last_seen_ms FROM hosts",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        rows.sort();
        rows
    };
    let want = rows(&one_by_one);
    assert_eq!(rows(&together), want);
    // GPU 0: lost from 3 s, answered at 5 s, missed at 7 s: not lost; GPU 1 lost from 6 s.
    let lost: Vec<Option<i64>> = want.iter().take(2).map(|r| r.1).collect();
    assert_eq!(lost, vec![None, Some(T0 + 6000)], "{want:?}");
    assert!(
        want.iter().take(2).all(|r| r.2 == Some(T0 + 7000)),
        "{want:?}"
    );
}
