//! XIDs: NVIDIA's catalogue of what each XID number means and what to do about it
//! ([`lookup`], [`describe`]), and the kernel log's `NVRM:` lines that report them
//! ([`nvrm`]). The alert message of `gpu_xid_error` (the `{name:xid}` template format),
//! `gpuwatch incident` and docs/XID.md all read the one table in [`catalogue`].
//!
//! Invariants: a number that is not in the catalogue is said to be so ([`NOT_IN_CATALOGUE`]),
//! never given a guessed meaning; docs/XID.md's table is [`markdown_table`]'s output (a test
//! compares them).

mod catalogue;
pub mod judge;
pub mod nvrm;

/// What an XID asks of the people running the machine, mildest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Nothing now (informational, corrected, or a follow-up of another XID).
    None,
    /// The application (training job) that was hit must be restarted; the GPU is fine.
    RestartJob,
    /// The GPU needs a reset (`nvidia-smi -r`) once its work is stopped.
    ResetGpu,
    /// The node needs its work moved off and a reboot.
    DrainNode,
    /// The GPU should be returned to the vendor.
    Rma,
}

impl Action {
    /// How the action reads in messages and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::RestartJob => "restart the job",
            Action::ResetGpu => "reset the GPU",
            Action::DrainNode => "drain the node",
            Action::Rma => "RMA",
        }
    }
}

/// Whose fault an XID usually is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The GPU's hardware: its memory, links, bus or power (the GPU needs service).
    Hardware,
    /// The application that ran on it (the GPU stays usable).
    Application,
    /// The driver, the GPU's firmware or the path to it (bus, system memory): neither clearly.
    Driver,
    /// A report about another event; nothing failed by itself.
    Informational,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Hardware => "hardware",
            Class::Application => "application",
            Class::Driver => "driver",
            Class::Informational => "informational",
        }
    }
}

/// What the default rules make of an XID: `Critical`, the GPU needs attention
/// (`gpu_xid_error`; the `xid_critical` metric counts these); `Warning`, a fault worth knowing
/// (the application's, a recoverable one), not an alert by itself; `Info`, said in the
/// event's message only.
pub use crate::model::Severity;

/// One XID of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub code: u32,
    /// NVIDIA's mnemonic, e.g. `ROBUST_CHANNEL_GPU_ECC_DBE`.
    pub name: &'static str,
    /// What happened, in a few words.
    pub meaning: &'static str,
    /// What usually causes it.
    pub cause: &'static str,
    /// What to do first.
    pub action: Action,
    /// Whose fault it usually is.
    pub class: Class,
    /// What the default rules make of it.
    pub severity: Severity,
    /// The action spelled out: conditions, escalation.
    pub detail: &'static str,
}

/// What is said about a number the catalogue does not have.
pub const NOT_IN_CATALOGUE: &str = "not in the catalogue";

/// The catalogue's entry for `code`, if it has one.
pub fn lookup(code: i64) -> Option<&'static Entry> {
    let code = u32::try_from(code).ok()?;
    catalogue::ENTRIES
        .binary_search_by_key(&code, |e| e.code)
        .ok()
        .map(|i| &catalogue::ENTRIES[i])
}

/// Whether `code` is a critical XID (the catalogue's severity; a code it does not have is
/// not): what the rule language's `xid_critical` counts and `gpu_xid_error` fires on.
pub fn is_critical(code: i64) -> bool {
    lookup(code).is_some_and(|e| e.severity == Severity::Critical)
}

/// Every entry, by code.
pub fn entries() -> &'static [Entry] {
    catalogue::ENTRIES
}

/// One short phrase for messages: `double-bit (uncorrectable) ECC error; action: reset the
/// GPU`, or "not in the catalogue".
pub fn describe(code: i64) -> String {
    match lookup(code) {
        Some(e) => format!("{}; action: {}", e.meaning, e.action.as_str()),
        None => NOT_IN_CATALOGUE.to_string(),
    }
}

/// An XID event's text for people: the catalogue's meaning and action said once. A message
/// gpuwatch wrote itself (`XID 13: graphics engine exception`, NVML's events) is a prefix of
/// the catalogue's phrase and becomes it; the driver's own text (`NVRM: Xid (PCI:...): 13,
/// ...`) is kept, followed by the catalogue's phrase.
pub fn event_text(code: i64, message: &str) -> String {
    let m = message.trim();
    let described = format!("XID {code}: {}", describe(code));
    if m.is_empty() || described.starts_with(m) {
        described
    } else {
        format!("{m} — {described}")
    }
}

/// docs/XID.md's table: one row per entry, with the action spelled out.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| XID | NVIDIA's name | meaning | likely cause | class | severity | action | what to do |\n|---|---|---|---|---|---|---|---|\n",
    );
    for e in entries() {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} | **{}** | {} |\n",
            e.code,
            e.name,
            e.meaning,
            e.cause,
            e.class.as_str(),
            e.severity.as_str(),
            e.action.as_str(),
            e.detail
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_says_its_meaning_once() {
        let once = "XID 13: graphics engine exception; action: restart the job";
        assert!(
            describe(13).starts_with("graphics engine exception"),
            "{}",
            describe(13)
        );
        assert_eq!(event_text(13, "XID 13: graphics engine exception"), once);
        assert_eq!(event_text(13, ""), once);
        let nvrm = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception";
        assert_eq!(event_text(13, nvrm), format!("{nvrm} — {once}"));
        assert_eq!(event_text(13, nvrm).matches("XID 13:").count(), 1);
    }

    #[test]
    fn the_table_is_sorted_with_one_row_per_code() {
        for w in entries().windows(2) {
            assert!(w[0].code < w[1].code, "{} before {}", w[0].code, w[1].code);
        }
        for e in entries() {
            assert_eq!(lookup(i64::from(e.code)), Some(e));
            for text in [e.name, e.meaning, e.cause, e.detail] {
                assert!(
                    !text.is_empty() && !text.contains('|'),
                    "XID {}: {text:?}",
                    e.code
                );
            }
        }
    }

    #[test]
    fn the_xids_people_meet_are_covered() {
        let wanted = [
            13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121,
            140, 143, 144, 145, 146, 147, 148, 149, 150, 154,
        ];
        let missing: Vec<i64> = wanted
            .into_iter()
            .filter(|&c| lookup(c).is_none())
            .collect();
        assert!(missing.is_empty(), "missing: {missing:?}");
        // The critical ones: hardware faults and the firmware's halts, each with an action.
        let critical: Vec<u32> = entries()
            .iter()
            .filter(|e| e.severity == Severity::Critical)
            .map(|e| e.code)
            .collect();
        assert_eq!(
            critical,
            [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140]
        );
        assert!(is_critical(79) && !is_critical(13) && !is_critical(2));
        // The application's own faults are its class, never critical.
        for c in [13, 31, 43, 45] {
            let e = lookup(c).expect("entry");
            assert_eq!(e.class, Class::Application, "XID {c}");
            assert!(e.severity < Severity::Critical, "XID {c}");
        }
        for c in [48, 63, 64, 74, 79, 92, 94, 95] {
            assert_eq!(lookup(c).map(|e| e.class), Some(Class::Hardware), "XID {c}");
        }
    }

    #[test]
    fn actions_follow_nvidias_resolution_buckets() {
        let action = |c| lookup(c).map(|e| e.action);
        assert_eq!(action(13), Some(Action::RestartJob)); // RESTART_APP
        assert_eq!(action(43), Some(Action::None)); // IGNORE
        assert_eq!(action(79), Some(Action::DrainNode)); // RESTART_BM
        assert_eq!(action(119), Some(Action::ResetGpu)); // RESET_GPU
        assert_eq!(action(94), Some(Action::RestartJob)); // contained
        assert_eq!(action(95), Some(Action::ResetGpu)); // uncontained
    }

    #[test]
    fn unknown_numbers_are_said_to_be_unknown() {
        assert_eq!(describe(2), NOT_IN_CATALOGUE);
        assert_eq!(describe(-1), NOT_IN_CATALOGUE);
        assert_eq!(describe(i64::MAX), NOT_IN_CATALOGUE);
        assert_eq!(
            describe(79),
            "GPU has fallen off the bus; action: drain the node"
        );
    }

    #[test]
    fn docs_xid_md_holds_the_catalogue() {
        let doc = include_str!("../../docs/XID.md");
        let table = markdown_table();
        assert!(
            doc.contains(&table),
            "docs/XID.md's table differs from the catalogue (src/xid/catalogue.rs); replace it with:\n{table}"
        );
    }
}
