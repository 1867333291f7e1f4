//! Gives back the executable's start-up pages: once the daemon runs, the code and read-only
//! data that only start-up touched (argument parsing, config, migrations, TLS and HTTP
//! client set-up, the kubelet client) stay resident for nothing. `MADV_PAGEOUT` (Linux 5.4+)
//! on the executable's read-only mappings reclaims its clean pages; what the daemon keeps
//! running is faulted back in within a tick or two and stays. (The kernel maps up to 64 KiB
//! of cached pages around each fault — fault-around, a system setting — so ~8 MiB of the
//! text comes back with the daemon's scattered hot functions; `MADV_RANDOM` does not change
//! that: measured, no difference.)
//!
//! Invariants: only read-only, file-backed mappings of the executable itself are touched (no
//! heap, stack, writable data or library), so nothing can be lost; older kernels answer
//! EINVAL and nothing happens; it runs once.
//!
//! It also owns the daemon's malloc setting: glibc gives every thread that allocates an arena
//! of its own (up to 8 per core), and the daemon's dozen threads each keep their arena's
//! freed, fragmented memory resident — about 5 MiB of RSS on 8 GPUs for no speed the daemon
//! needs (its threads allocate little, and mostly not at the same moment). [`one_malloc_arena`]
//! limits glibc to one arena before any thread starts.

use std::path::PathBuf;

/// `MADV_PAGEOUT` from `<linux/mman.h>` (libc does not define it for every target).
const MADV_PAGEOUT: libc::c_int = 21;

/// The executable's read-only mappings as (start, length).
fn executable_ranges() -> Vec<(usize, usize)> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let path: Option<PathBuf> = f.nth(3).map(PathBuf::from);
        if path.as_ref() != Some(&exe) || perms.contains('w') {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            && b > a
        {
            out.push((a, b - a));
        }
    }
    out
}

/// Reclaims the executable's clean start-up pages; returns the bytes advised.
pub fn release_startup_pages() -> usize {
    let mut advised = 0;
    for (start, len) in executable_ranges() {
        // SAFETY: (start, len) is a whole read-only, file-backed mapping of this process's
        // executable, read from /proc/self/maps; MADV_PAGEOUT only drops clean pages, which
        // the kernel reads back from the file on the next access: no memory changes.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, MADV_PAGEOUT) };
        if rc == 0 {
            advised += len;
        }
    }
    advised
}

/// Makes glibc's malloc serve every thread from the main arena (`M_ARENA_MAX` = 1). Called
/// by the daemon commands before they start a thread; other C libraries are left as they are.
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tuning; it is called before any other thread
    // exists, and M_ARENA_MAX takes any positive value.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_executables_read_only_mappings() {
        let ranges = super::executable_ranges();
        assert!(!ranges.is_empty(), "the test binary maps itself");
        // The process keeps running normally afterwards (its code is faulted back in).
        super::release_startup_pages();
        assert_eq!(super::executable_ranges(), ranges);
    }
}
