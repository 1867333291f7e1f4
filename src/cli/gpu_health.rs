//! `gpuwatch gpu health`: this host's GPUs judged from their stored samples (docs/HEALTH.md),
//! and `--slurm`, Slurm's `HealthCheckProgram`: one line, and — where `[remediation]` is on
//! with `action = "slurm"` — the node drained when a GPU fails (docs/REMEDIATION.md).
//!
//! Exit codes: 0 no GPU fails (each judged ok, warn or unknown, at least one judged); 1 a GPU
//! fails, or none could be judged (no fresh sample: is `gpuwatch run` running?), or the
//! remediation log could not be written; 2 a bad command line or configuration. Slurm does
//! not act on the exit status; the drain is gpuwatch's own.

use serde_json::json;

use super::{ConfigArgs, Failure, exit, fail};
use crate::clock::now_ms;
use crate::gpu_health::{self, Status};
use crate::remediate::{self, Fault, Who};
use crate::store;

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    /// For people (also accepted as `text`).
    #[default]
    #[value(alias = "text")]
    Table,
    /// One JSON document: each GPU's verdict, the faults that act, and the decision.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Slurm's HealthCheckProgram: print one line; when a GPU fails and `[remediation]` is on
    /// with action = "slurm", drain this node (`scontrol update … State=DRAIN`), under the
    /// breaker, audited; `dry_run` says what it would do.
    #[arg(long)]
    pub slurm: bool,
    /// Say (and audit) what `--slurm` would do without doing it, whatever `[remediation]
    /// dry_run` says.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(a: HealthArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let now = now_ms();
    let stale = cfg.http.stall_after.as_millis() as i64;
    let rows = {
        let conn = store::open_read_only(&cfg.database)?;
        store::read::latest_per_gpu(&conn, Some(&cfg.host), now)?
    };
    let verdicts: Vec<_> = rows
        .iter()
        .map(|r| (r, gpu_health::judge(r, stale)))
        .collect();
    let acting: Vec<String> = match &cfg.remediation {
        Some(r) => r.health.clone(),
        None => crate::config::remediation::DEFAULT_HEALTH
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let faults: Vec<Fault> = remediate::health_faults(&rows, stale, &acting);
    let judged = verdicts.iter().any(|(_, h)| h.status != Status::Unknown);
    let failing = verdicts.iter().any(|(_, h)| h.status == Status::Fail);
    let decision = match (&cfg.remediation, a.slurm) {
        (Some(r), true) if matches!(r.action, crate::config::remediation::Action::Slurm { .. }) => {
            let mut st = store::open(&cfg.database, &store::StoreConfig::new(cfg.host.clone()))
                .map_err(|e| fail(exit::FAILURE, e))?;
            let actor = crate::manage::who::Actor::current();
            let who = Who {
                name: actor.name,
                uid: Some(actor.uid),
            };
            let backend = remediate::backend(&r.action);
            let r = crate::config::remediation::RemediationConfig {
                dry_run: r.dry_run || a.dry_run,
                ..r.clone()
            };
            Some(
                remediate::run(&mut st, &r, backend.as_ref(), &who, &faults, now)
                    .map_err(|e| fail(exit::FAILURE, e))?,
            )
        }
        _ => None,
    };
    let line = match (&decision, faults.first(), judged) {
        (Some(d), _, _) => d.line.clone(),
        (None, Some(f), _) => format!(
            "{}{}",
            f.reason(),
            if a.slurm {
                "; remediation is off ([remediation] enabled = true, action = \"slurm\" drains the node)"
            } else {
                ""
            }
        ),
        (None, None, true) => format!("gpuwatch: ok: {} GPU(s) judged, none fails", rows.len()),
        (None, None, false) => "gpuwatch: cannot judge: no fresh sample of any GPU on this host (is `gpuwatch run` running?)".into(),
    };
    match a.format {
        Format::Json => {
            let gpus: Vec<_> = verdicts
                .iter()
                .map(|(r, h)| {
                    json!({
                        "gpu_index": r.inventory.index,
                        "uuid": r.inventory.uuid,
                        "name": r.inventory.name,
                        "health": h.json(),
                    })
                })
                .collect();
            let doc = json!({
                "host": cfg.host,
                "gpus": gpus,
                "faults": faults.iter().map(|f| json!({
                    "gpu_index": f.gpu_index,
                    "uuid": f.gpu_uuid,
                    "code": f.code,
                    "text": f.text,
                })).collect::<Vec<_>>(),
                "remediation": decision.as_ref().map(|d| json!({"result": d.result, "line": d.line})),
                "line": line,
            });
            println!("{doc}");
        }
        Format::Table if a.slurm => println!("{line}"),
        Format::Table => {
            for (r, h) in &verdicts {
                println!(
                    "GPU {} {}: {}",
                    r.inventory.index,
                    r.inventory.uuid,
                    h.status.as_str()
                );
                for x in &h.reasons {
                    println!(
                        "  {} {}: {} — {}",
                        x.severity.as_str(),
                        x.code,
                        x.text,
                        x.fix
                    );
                }
            }
            println!("{line}");
        }
    }
    if decision.as_ref().is_some_and(|d| d.result == "failed") {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "the drain failed (see the line above and `gpuwatch query \"SELECT * FROM remediation_audit\"`)"
            ),
        ));
    }
    if failing {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!("a GPU fails its health check"),
        ));
    }
    if !judged {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!("no GPU could be judged"),
        ));
    }
    Ok(())
}
