//! `gpuwatch notify test [--receiver NAME]`: sends a test message through each configured
//! receiver (or one) right now, bypassing the outbox, and reports success or the exact
//! failure (secrets scrubbed).

use std::time::Instant;

use crate::clock::now_ms;
use crate::notify::{AlertMsg, BuildCtx, Notification, Receiver, SendError};
use crate::secret;

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct NotifyArgs {
    #[command(subcommand)]
    pub command: NotifyCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum NotifyCommand {
    /// Send a test message to every receiver (or one) and report what happened.
    Test(TestArgs),
}

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Only this receiver (its `name`).
    #[arg(long)]
    pub receiver: Option<String>,
}

pub fn run(args: NotifyArgs) -> Result<(), Failure> {
    match args.command {
        NotifyCommand::Test(a) => test(a),
    }
}

fn test(a: TestArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    if cfg.notify.receivers.is_empty() {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!(
                "no receivers configured\nadd [[notify.slack]], [[notify.email]], [[notify.webhook]] or [[notify.alertmanager]] to the config (see docs/ALERTING.md)"
            ),
        ));
    }
    let chosen: Vec<_> = cfg
        .notify
        .receivers
        .iter()
        .filter(|r| a.receiver.as_ref().is_none_or(|n| *n == r.name))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = cfg
            .notify
            .receivers
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!(
                "no receiver named {:?}; receivers are: {}",
                a.receiver.unwrap_or_default(),
                names.join(", ")
            ),
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ctx = BuildCtx {
        db: cfg.database.exists().then(|| cfg.database.clone()),
        host: cfg.host.clone(),
    };
    let now = now_ms();
    let mut failed = 0;
    for rc in chosen {
        let kind = rc.kind.type_name();
        let receiver = match Receiver::build(rc, &ctx) {
            Ok(r) => r,
            Err(e) => {
                failed += 1;
                println!(
                    "{} ({kind}): FAILED to set up: {}",
                    rc.name,
                    secret::scrub(&e)
                );
                continue;
            }
        };
        let n = Notification {
            digest: None,
            receiver: rc.name.clone(),
            group_key: "test".into(),
            alerts: vec![AlertMsg {
                state: "firing".into(),
                rule: "gpuwatch_test".into(),
                severity: "info".into(),
                labels: [
                    ("rule".to_string(), "gpuwatch_test".to_string()),
                    ("severity".to_string(), "info".to_string()),
                    ("host".to_string(), cfg.host.clone()),
                ]
                .into(),
                summary: format!(
                    "test message from gpuwatch on {} to receiver {}",
                    cfg.host, rc.name
                ),
                host: cfg.host.clone(),
                starts_ms: now,
                fired_ms: now,
                ..Default::default()
            }],
            test: true,
            sender_host: cfg.host.clone(),
            now_ms: now,
            ..Default::default()
        };
        let started = Instant::now();
        let result = rt.block_on(async {
            tokio::time::timeout(
                rc.timeout + std::time::Duration::from_secs(5),
                receiver.send(&n),
            )
            .await
            .unwrap_or_else(|_| Err(SendError::transient("no answer in time")))
        });
        match result {
            Ok(()) => println!(
                "{} ({kind}): ok in {} ms",
                rc.name,
                started.elapsed().as_millis()
            ),
            Err(e) => {
                failed += 1;
                println!(
                    "{} ({kind}): FAILED: {}",
                    rc.name,
                    secret::scrub(&e.to_string())
                );
            }
        }
    }
    if failed > 0 {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!("{failed} receiver(s) failed the test"),
        ));
    }
    Ok(())
}
