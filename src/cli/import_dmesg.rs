//! `gpuwatch import dmesg FILE...`: XIDs from saved kernel logs (every shape
//! [`crate::import::dmesg`] reads) into `events`, as the daemon's kernel-log follower would
//! have stored them, and a summary.
//!
//! The rows belong to `--host`, else to the host the journal or syslog lines name, else to
//! the configured host (this machine's name by default). Invariants: all files are read
//! before anything is written and published in one transaction (an error anywhere imports
//! nothing, and a database or host created for the import is removed again); imported XIDs
//! that `retention` would delete at once are refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, anyhow};

use crate::import::dmesg::{self, Options};
use crate::import::nvidia_smi::Zone;
use crate::model::TsMs;
use crate::store::{self, import::KernelXid, incident as store_incident};

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Shapes read (mixed in one file too):
  dmesg -T                        [Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, ...
  dmesg --time-format iso         2024-11-15T05:39:15,491363+00:00 NVRM: Xid ...
  dmesg --decode ...              kern  :warn  : 2025-01-21T02:21:33,498559+00:00 NVRM: Xid ...
  journalctl -k -o short-iso      2025-01-21T02:21:33+0000 node7 kernel: NVRM: Xid ...
  syslog (/var/log/kern.log)      Jan 21 02:21:33 node7 kernel: [12345.678] NVRM: Xid ...
  dmesg (seconds since boot)      [12345.678901] NVRM: Xid ...   (needs --boot-time)
Other lines are skipped and counted. `NVRM: GPU at PCI:... GPU-<uuid>` lines name the GPU at an
address; otherwise the host's stored inventory does, or the XID keeps its PCI address alone.
The XID numbers are explained in docs/XID.md.")]
pub struct ImportDmesgArgs {
    /// Saved kernel logs (all or nothing).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Host the XIDs belong to [default: the host the journal/syslog lines name, else the
    /// configured host, this machine's name by default].
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    /// IANA zone of `dmesg -T` and syslog times, which carry none [default: this machine's
    /// zone].
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// When the machine booted (RFC 3339 or unix seconds), for raw `dmesg` lines in seconds
    /// since boot.
    #[arg(long, value_name = "T", value_parser = super::timearg::parse_time)]
    pub boot_time: Option<TsMs>,
}

pub fn run(args: ImportDmesgArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let zone =
        Zone::parse(args.tz.as_deref()).map_err(|e| fail(exit::USAGE, anyhow!("--tz: {e}")))?;
    if args.host.as_deref().is_some_and(str::is_empty) {
        return Err(fail(exit::USAGE, anyhow!("--host must not be empty")));
    }
    let opts = Options {
        zone,
        boot_ms: args.boot_time,
    };
    let parsed = dmesg::read_files(&args.files, &opts).map_err(|e| fail(exit::FAILURE, e))?;
    let host = match (&args.host, parsed.hosts.len()) {
        (Some(h), _) => h.clone(),
        (None, 0) => cfg.host.clone(),
        (None, 1) => parsed.hosts.iter().next().cloned().unwrap_or_default(),
        (None, _) => {
            let names: Vec<&str> = parsed.hosts.iter().map(String::as_str).collect();
            return Err(fail(
                exit::USAGE,
                anyhow!(
                    "the logs name several hosts ({}): import each host's lines with --host; nothing was imported",
                    names.join(", ")
                ),
            ));
        }
    };
    for f in &parsed.files {
        let shapes: Vec<String> = f
            .shapes
            .iter()
            .map(|(s, n)| format!("{}: {n}", s.name()))
            .collect();
        let xids: u64 = f.shapes.values().sum();
        println!(
            "{}: {} lines, {xids} XIDs{}, {} other lines skipped",
            f.path,
            f.lines,
            if shapes.is_empty() {
                String::new()
            } else {
                format!(" ({})", shapes.join(", "))
            },
            f.skipped
        );
    }
    let skipped: u64 = parsed.files.iter().map(|f| f.skipped).sum();
    if parsed.xids.is_empty() {
        println!("no NVRM XID lines: nothing to import");
        println!("skipped lines: {skipped}");
        return Ok(());
    }
    let first = parsed.xids.iter().map(|x| x.ts_ms).min().unwrap_or(0);
    let last = parsed.xids.iter().map(|x| x.ts_ms).max().unwrap_or(0);
    let existing = store::open_read_only_if_sound(&cfg.database)
        .with_context(|| format!("opening {}", cfg.database.display()))?;
    if let Some(conn) = existing
        && let Some((_, newest)) = store_incident::host_span(&conn, &host)?
    {
        let keep = i64::try_from(cfg.rollup_retention.as_millis()).unwrap_or(i64::MAX);
        if first < newest.saturating_sub(keep) {
            return Err(fail(
                exit::FAILURE,
                anyhow!(
                    "the XIDs start at {}, and events are kept for `rollup_retention` ({}) counted back from host {host}'s newest data ({}): they would be deleted right away; nothing was imported (use a config with a longer `rollup_retention`, or import into another --host)",
                    crate::format::utc_label(first),
                    humantime::format_duration(cfg.rollup_retention),
                    crate::format::utc_label(newest)
                ),
            ));
        }
    }
    let host_existed = store::import::host_exists(&cfg.database, &host);
    let db_existed = cfg.database.exists();
    let mut st_cfg = store::StoreConfig::new(host.clone());
    st_cfg.retention = cfg.retention;
    st_cfg.rollup_retention = cfg.rollup_retention;
    st_cfg.max_db_size = cfg.max_db_size;
    let st = store::open(&cfg.database, &st_cfg)
        .with_context(|| format!("opening {}", cfg.database.display()))?;
    crate::notify::recovered::announce(&st, &cfg);
    let xids: Vec<KernelXid> = parsed
        .xids
        .iter()
        .map(|x| KernelXid {
            ts_ms: x.ts_ms,
            pci: x.pci.clone(),
            code: x.code,
            message: x.message.clone(),
            uuid: x.uuid.clone(),
        })
        .collect();
    let result = st.publish_kernel_xids(&host, &xids);
    if result.is_err() {
        if !host_existed && let Err(e) = st.forget_unused_host(&host) {
            tracing::warn!(error = %e, host, "could not remove the unused host row");
        }
        if !db_existed {
            drop(st);
            for suffix in ["", "-wal", "-shm"] {
                let mut p = cfg.database.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
    let out = result.with_context(|| {
        format!(
            "writing to {}; nothing was imported",
            cfg.database.display()
        )
    })?;
    println!(
        "imported {} XIDs for host {host} into {}: {} new, {} merged with NVML's report of the same XID, {} already stored; {} run(s) of repeated XIDs stored",
        xids.len(),
        cfg.database.display(),
        out.inserted,
        out.merged,
        out.duplicates,
        out.runs
    );
    for (pci, uuid) in &out.gpus {
        match uuid {
            Some(u) => println!("  PCI {pci}: {u}"),
            None => println!(
                "  PCI {pci}: no GPU known at this address; stored by its address (it joins its GPU when an inventory or a `NVRM: GPU at` line names it)"
            ),
        }
    }
    if out.joined > 0 {
        println!("  {} XIDs stored earlier joined their GPU", out.joined);
    }
    let mut by_code: BTreeMap<i64, u64> = BTreeMap::new();
    for x in &xids {
        *by_code.entry(x.code).or_default() += 1;
    }
    for (code, n) in &by_code {
        println!("  XID {code} x{n}: {}", crate::xid::describe(*code));
    }
    println!(
        "time span: {} .. {}",
        crate::format::utc_label(first),
        crate::format::utc_label(last)
    );
    println!("skipped lines: {skipped}");
    if out.inserted + out.merged == 0 && out.joined == 0 {
        return Err(fail(
            exit::FAILURE,
            anyhow!(
                "every XID of the log is already stored for host {host}: nothing new was imported"
            ),
        ));
    }
    Ok(())
}
