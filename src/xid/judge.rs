//! Whose fault one XID is, from the catalogue and the evidence around it: the job it hit,
//! that job's crash, the same code on the same GPU in other jobs. The rule evaluator (the
//! `xid_critical` and `xid_crash` series) and `gpuwatch incident` ask the same function.
//!
//! The verdict, first match wins:
//! 1. an `[[xid.override]]` class (`hardware`, `application`);
//! 2. `hardware`, critical: the catalogue's severity is critical (48, 61-64, 74, 79, 92,
//!    94/95, 119/120, 140: the GPU needs service);
//! 3. `hardware`, critical: the same code on the same GPU in another job within 24 h (an
//!    application's bug follows the application, not the GPU);
//! 4. `application`, a crash: on at least half of its job's GPUs on the node, with the job's
//!    processes exiting on at least half of them, all within ±60 s;
//! 5. `application`: a code the catalogue says is usually the application's (13, 31, 43,
//!    45, 68, 69), not an alert by itself while the job runs on;
//! 6. `hardware`, not critical: a code the catalogue puts on the hardware with a warning
//!    (NVLink 5 non-fatal reports);
//! 7. `unknown` otherwise, said as such.
//!
//! Invariant: a verdict always carries its reason in words, for alerts and incidents.

use super::{Class, Severity, lookup};

/// How far from an XID its job's processes must exit, and its job's other GPUs have theirs,
/// for a crash of the job (both ways: ±60 s).
pub const CRASH_WINDOW_MS: i64 = 60_000;
/// How long a GPU's XIDs are remembered to find the same code in another job.
pub const REPEAT_WINDOW_MS: i64 = 24 * 3_600_000;

/// The classes an XID is judged into (the `xid_class` label's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XidClass {
    Hardware,
    Application,
    Unknown,
}

impl XidClass {
    pub fn as_str(self) -> &'static str {
        match self {
            XidClass::Hardware => "hardware",
            XidClass::Application => "application",
            XidClass::Unknown => "unknown",
        }
    }
}

/// What is known about a job's crash around an XID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobCrash {
    /// The job's GPUs on the node.
    pub job_gpus: usize,
    /// Of those, the GPUs with an XID within ±60 s.
    pub with_xid: usize,
    /// Of those, the GPUs whose job processes exited within ±60 s.
    pub exited: usize,
}

impl JobCrash {
    /// At least half the job's GPUs had an XID and saw their processes exit.
    pub fn holds(&self) -> bool {
        self.job_gpus > 0 && self.with_xid * 2 >= self.job_gpus && self.exited * 2 >= self.job_gpus
    }
}

/// The evidence about one XID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence {
    pub code: i64,
    /// The class an `[[xid.override]]` gives the code (`Unknown` is never forced).
    pub forced: Option<XidClass>,
    /// Other jobs that had the same code on the same GPU within 24 h.
    pub other_jobs: usize,
    /// The job's crash, when it was looked at.
    pub crash: Option<JobCrash>,
}

/// A judgement with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub class: XidClass,
    /// Hardware that needs service now (`gpu_xid_error`).
    pub critical: bool,
    /// The job crashed with it (`xid_application_crash`).
    pub crash: bool,
    pub reason: String,
}

/// The job key of a GPU whose job has no name: the set of its processes, `pids:1,2`.
pub fn job_key_of_pids(pids: impl IntoIterator<Item = i64>) -> String {
    let mut pids: Vec<i64> = pids.into_iter().collect();
    pids.sort_unstable();
    pids.dedup();
    let pids: Vec<String> = pids.iter().map(i64::to_string).collect();
    format!("pids:{}", pids.join(","))
}

/// Whether job keys `a` and `b` (`job:…`, `pod:…`, or `pids:…`) are different jobs: named
/// ones by name; sets of processes only when they share none (a job that started a helper
/// process is the same job).
pub fn other_job(a: &str, b: &str) -> bool {
    match (a.strip_prefix("pids:"), b.strip_prefix("pids:")) {
        (Some(x), Some(y)) => {
            let x: Vec<&str> = x.split(',').filter(|p| !p.is_empty()).collect();
            !y.split(',').any(|p| x.contains(&p))
        }
        _ => a != b,
    }
}

/// Codes that count towards a job's crash: any but the informational ones.
pub fn may_crash_a_job(code: i64) -> bool {
    lookup(code).is_none_or(|e| e.class != Class::Informational)
}

/// Judges one XID.
pub fn judge(e: &Evidence) -> Verdict {
    let entry = lookup(e.code);
    let v = |class, critical, crash, reason: String| Verdict {
        class,
        critical,
        crash,
        reason,
    };
    match e.forced {
        Some(XidClass::Hardware) => {
            return v(
                XidClass::Hardware,
                true,
                false,
                "the configuration ([[xid.override]]) says this code is the hardware's".into(),
            );
        }
        Some(XidClass::Application) => {
            let crash = e.crash.is_some_and(|c| c.holds());
            return v(
                XidClass::Application,
                false,
                crash,
                "the configuration ([[xid.override]]) says this code is the application's".into(),
            );
        }
        _ => {}
    }
    if entry.is_some_and(|x| x.severity == Severity::Critical) {
        return v(
            XidClass::Hardware,
            true,
            false,
            "the catalogue says this XID needs the GPU serviced".into(),
        );
    }
    if e.other_jobs > 0 {
        return v(
            XidClass::Hardware,
            true,
            false,
            format!(
                "the same XID hit this GPU in {} different job(s) within 24 h: it follows the GPU, not a program",
                e.other_jobs + 1
            ),
        );
    }
    if let Some(c) = e.crash.filter(JobCrash::holds) {
        return v(
            XidClass::Application,
            false,
            true,
            format!(
                "on {} of the job's {} GPU(s) on this node as its processes exited: the job crashed",
                c.with_xid, c.job_gpus
            ),
        );
    }
    match entry.map(|x| x.class) {
        Some(Class::Application) => v(
            XidClass::Application,
            false,
            false,
            "the catalogue says this XID is usually the application's".into(),
        ),
        Some(Class::Hardware) => v(
            XidClass::Hardware,
            false,
            false,
            "the catalogue puts it on the hardware, as a warning".into(),
        ),
        _ => v(
            XidClass::Unknown,
            false,
            false,
            "neither the catalogue nor the job's history says whose fault it is".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: i64) -> Evidence {
        Evidence {
            code,
            forced: None,
            other_jobs: 0,
            crash: None,
        }
    }

    #[test]
    fn the_catalogue_decides_alone_for_hardware_and_gives_the_class_otherwise() {
        let j = judge(&ev(79));
        assert_eq!(
            (j.class, j.critical, j.crash),
            (XidClass::Hardware, true, false)
        );
        let j = judge(&ev(13));
        assert_eq!(
            (j.class, j.critical, j.crash),
            (XidClass::Application, false, false)
        );
        assert_eq!(judge(&ev(8)).class, XidClass::Unknown);
        assert_eq!(judge(&ev(9999)).class, XidClass::Unknown);
        assert_eq!(judge(&ev(145)).class, XidClass::Hardware);
        assert!(!judge(&ev(145)).critical);
    }

    #[test]
    fn the_same_code_in_another_job_is_the_gpu() {
        let j = judge(&Evidence {
            other_jobs: 1,
            ..ev(13)
        });
        assert_eq!((j.class, j.critical), (XidClass::Hardware, true));
        assert!(j.reason.contains("2 different job"), "{}", j.reason);
    }

    #[test]
    fn a_crash_needs_half_the_job_s_gpus_with_the_xid_and_their_processes_gone() {
        let crash = |job_gpus, with_xid, exited| Evidence {
            crash: Some(JobCrash {
                job_gpus,
                with_xid,
                exited,
            }),
            ..ev(31)
        };
        assert!(judge(&crash(8, 4, 4)).crash);
        assert!(judge(&crash(1, 1, 1)).crash);
        assert!(
            !judge(&crash(8, 3, 8)).crash,
            "fewer than half with the XID"
        );
        assert!(!judge(&crash(8, 8, 0)).crash, "the job ran on");
        assert!(!judge(&crash(0, 0, 0)).crash);
        // A hardware XID stays the hardware's when the job dies with it.
        let j = judge(&Evidence {
            code: 48,
            ..crash(4, 4, 4)
        });
        assert_eq!((j.class, j.crash), (XidClass::Hardware, false));
    }

    #[test]
    fn process_sets_are_other_jobs_only_when_disjoint() {
        assert_eq!(job_key_of_pids([3, 1, 3]), "pids:1,3");
        assert!(other_job("pids:1,2", "pids:3"));
        assert!(
            !other_job("pids:1,2", "pids:2,4"),
            "a helper joined the job"
        );
        assert!(other_job("job:a", "job:b"));
        assert!(!other_job("job:a", "job:a"));
        assert!(other_job("job:a", "pids:1"));
    }

    #[test]
    fn an_override_comes_first() {
        let j = judge(&Evidence {
            forced: Some(XidClass::Application),
            ..ev(79)
        });
        assert_eq!((j.class, j.critical), (XidClass::Application, false));
        let j = judge(&Evidence {
            forced: Some(XidClass::Hardware),
            ..ev(13)
        });
        assert_eq!((j.class, j.critical), (XidClass::Hardware, true));
    }
}
