//! `gpuwatch-detection`: runs the labelled detection benchmark against a gpuwatch binary and
//! prints the results as markdown (optionally also writing it and the per-run JSON records).
//!
//! Exit codes: 0 whenever the benchmark ran (it measures; the test suite asserts floors), 2
//! for a usage error, 1 when it could not run at all (no binary, nothing selected).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use gpuwatch_detection::{DEFAULT_SEED, Options, bench, cases::Set, default_gpuwatch, report};

const USAGE: &str = "\
usage: gpuwatch-detection [--set quick|full] [--jobs N] [--gpuwatch PATH] [--seed N]
                          [--markdown FILE] [--json FILE] [--case NAME] [--shape NAME]
                          [--keep DIR] [--timeout SECS] [--quiet]

  --set       quick (13 cases in nvml, full+apps@5s, basic@15s, minimal@60s; the test slice)
              or full (every family and shape) [default: quick]
  --jobs      parallel gpuwatch runs [default: available parallelism]
  --gpuwatch  the binary under test [default: $GPUWATCH_BIN, else gpuwatch next to this
              executable, else one directory up]
  --seed      seeds every case [default: 20250303, the published figures]
  --markdown  also write the markdown report here
  --json      write one JSON record per run here (labels, alerts, matches)
  --case      only this case (leak-2) or family (leak)
  --shape     only this shape (basic@15s) or group (basic)
  --keep      keep every run's files (scenario, CSV, databases) in DIR/CASE/SHAPE
  --timeout   longest a single gpuwatch command may run [default: 600]
  --quiet     no progress lines on stderr";

struct Args {
    opts: Options,
    markdown: Option<PathBuf>,
    json: Option<PathBuf>,
}

fn parse(mut argv: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut opts = Options {
        set: Set::Quick,
        seed: DEFAULT_SEED,
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        gpuwatch: default_gpuwatch(),
        case: None,
        shape: None,
        keep: None,
        progress: true,
        timeout: Duration::from_secs(600),
    };
    let (mut markdown, mut json) = (None, None);
    while let Some(flag) = argv.next() {
        if flag == "--quiet" {
            opts.progress = false;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = argv.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        let number = |v: &str| -> anyhow::Result<u64> {
            v.parse()
                .with_context(|| format!("{flag}: `{v}` is not a whole number"))
        };
        match flag.as_str() {
            "--set" => {
                opts.set = match value.as_str() {
                    "quick" => Set::Quick,
                    "full" => Set::Full,
                    other => bail!("--set: `{other}` is neither quick nor full"),
                }
            }
            "--jobs" => opts.jobs = number(&value)?.max(1) as usize,
            "--gpuwatch" => opts.gpuwatch = PathBuf::from(value),
            "--seed" => opts.seed = number(&value)?,
            "--markdown" => markdown = Some(PathBuf::from(value)),
            "--json" => json = Some(PathBuf::from(value)),
            "--case" => opts.case = Some(value),
            "--shape" => opts.shape = Some(value),
            "--keep" => opts.keep = Some(PathBuf::from(value)),
            "--timeout" => opts.timeout = Duration::from_secs(number(&value)?.max(1)),
            other => bail!("unknown option {other}"),
        }
    }
    Ok(Args {
        opts,
        markdown,
        json,
    })
}

fn main() {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let b = bench::run(&args.opts)?;
    let md = report::markdown(&b);
    if let Some(p) = &args.markdown {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.json {
        std::fs::write(p, report::json(&b)).with_context(|| format!("writing {}", p.display()))?;
    }
    print!("{md}");
    Ok(())
}
