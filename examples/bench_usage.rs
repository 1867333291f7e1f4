//! The usage ledger's accounting pass over stored history (what `import` runs after it
//! publishes): the evaluator's engine stepped through every sample time of a host, every GPU
//! observed, the ledger's rows replaced in one transaction.
//!
//!   cargo run --release --example bench_usage -- DB HOST[,HOST...] [FROM_MS TO_MS]
//!
//! Prints the wall time and the rows written; run it on a database an import filled (e.g.
//! `KEEP=1 benches/import_prometheus.sh` leaves one).

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(
        args.len() >= 3,
        "usage: bench_usage DB HOST [FROM_MS TO_MS]"
    );
    let db = std::path::PathBuf::from(&args[1]);
    let host = &args[2];
    let (from, to) = match (args.get(3), args.get(4)) {
        (Some(a), Some(b)) => (a.parse()?, b.parse()?),
        _ => (i64::MIN / 4, i64::MAX / 4),
    };
    let started = Instant::now();
    let hosts: Vec<String> = host.split(',').map(str::to_string).collect();
    let changes = gpuwatch::alerts::usage::account(&db, &hosts, (from, to))?;
    println!(
        "accounted {host}: {changes} ledger changes in {:.3?}",
        started.elapsed()
    );
    Ok(())
}
