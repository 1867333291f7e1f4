//! `scripts/hot_functions.py`, which turns a link map and uprobe hit counts into
//! `link/hot-functions.txt`: the probes land at each function's file offset, and the order
//! lists what ran in each phase (the loops its faults name, then the rest most called first),
//! then the previous list's rest.

use std::path::Path;
use std::process::Command;

/// A link map in lld's layout with four function sections (and one empty one, skipped).
const MAP: &str = "\
             VMA              LMA     Size Align Out     In      Symbol
          401000           401000      300    16 .text
          401000           401000      100    16         a.o:(.text.alpha)
          401100           401100      100    16         b.o:(.text.unlikely.beta)
          401200           401200        0    16         c.o:(.text.empty)
          401200           401200      100    16         d.o:(.text.gamma)
          401300           401300      100    16         e.o:(.text.omega)
";

/// A 64-bit ELF header with one PT_LOAD segment: vaddr 0x400000 at file offset 0x1000.
fn tiny_elf() -> Vec<u8> {
    let mut f = vec![0u8; 64 + 56];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 2; // 64-bit
    f[5] = 1; // little-endian
    f[0x20..0x28].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    f[0x36..0x38].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    f[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let ph = &mut f[64..];
    ph[..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    ph[8..16].copy_from_slice(&0x1000u64.to_le_bytes()); // p_offset
    ph[16..24].copy_from_slice(&0x400000u64.to_le_bytes()); // p_vaddr
    ph[32..40].copy_from_slice(&0x10000u64.to_le_bytes()); // p_filesz
    f
}

fn script(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/hot_functions.py"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// uprobe_profile's layout: file, event, hits.
fn profile(hits: &[u64]) -> String {
    hits.iter()
        .enumerate()
        .map(|(i, h)| format!("  /x/gwbin f{i}      {h}\n"))
        .collect()
}

#[test]
fn probes_sit_at_file_offsets_and_the_order_follows_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("map"), MAP).unwrap();
    std::fs::write(p.join("exe"), tiny_elf()).unwrap();
    assert_eq!(
        script(p, &["probes", "map", "exe", "g"]),
        "p:g/f0 exe:0x2000\np:g/f1 exe:0x2100\np:g/f2 exe:0x2200\np:g/f3 exe:0x2300\n"
    );

    // Plain phase: gamma called 9 times, alpha 5 (alpha's 3 calls before it are start-up's),
    // the faults name omega (a loop entered at start-up) and alpha, in that order, and one
    // lies outside every function. Fleet phase: beta newly called; alpha and gamma again
    // (already listed).
    std::fs::write(p.join("plain0"), profile(&[3, 0, 0, 1])).unwrap();
    std::fs::write(p.join("plain1"), profile(&[8, 0, 9, 1])).unwrap();
    std::fs::write(p.join("plainf"), "  401350\n  401010\n  500000\n").unwrap();
    std::fs::write(p.join("fleet0"), profile(&[8, 0, 9, 1])).unwrap();
    std::fs::write(p.join("fleet1"), profile(&[20, 4, 30, 1])).unwrap();
    std::fs::write(p.join("previous"), "delta\nalpha\nepsilon\n").unwrap();
    let order = script(
        p,
        &[
            "order",
            "map",
            "plain0,plain1,plainf",
            "fleet0,fleet1",
            "--then",
            "previous",
        ],
    );
    assert_eq!(order, "omega\nalpha\ngamma\nbeta\ndelta\nepsilon\n");
}
