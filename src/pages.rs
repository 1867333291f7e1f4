//! Gives back pages the daemon does not use: once it runs, the code and read-only data that
//! only start-up touched (argument parsing, config, migrations, TLS and HTTP client set-up,
//! the kubelet client) stay resident for nothing, and so does what a rare path (a rollup, a
//! scrape, a report of the NVML library) faulted in since. `MADV_PAGEOUT` (Linux 5.4+) on the
//! read-only file mappings — the executable and the shared libraries, NVML's included —
//! reclaims their clean pages; what the daemon keeps running is faulted back in within a tick
//! or two. (The kernel maps up to 64 KiB of cached pages around each fault — fault-around, a
//! system setting — so the daemon's scattered hot functions bring some of their neighbours
//! back; `MADV_RANDOM` does not change that: measured, no difference.) The heap's free
//! chunks are given back with them (`malloc_trim`). The daemon does this after 30 ticks and
//! then every ten minutes.
//!
//! Invariants: only read-only, file-backed mappings are advised (no heap, stack or writable
//! data), and `malloc_trim` only returns free memory, so nothing can be lost; older kernels
//! answer EINVAL and nothing happens.
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
#[cfg(test)]
fn executable_ranges() -> Vec<(usize, usize)> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    read_only_file_ranges(|path| path == exe)
}

/// The read-only mappings of files (the executable, shared libraries) as (start, length).
fn file_ranges() -> Vec<(usize, usize)> {
    read_only_file_ranges(|path| path.is_absolute())
}

/// The read-only mappings of the files `wanted` selects, as (start, length).
fn read_only_file_ranges(wanted: impl Fn(&std::path::Path) -> bool) -> Vec<(usize, usize)> {
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
        if !path.as_deref().is_some_and(&wanted) || perms.contains('w') {
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

/// Reclaims the clean pages of the executable's and the libraries' read-only mappings and
/// the heap's free memory; returns the bytes advised.
pub fn release_cold_pages() -> usize {
    let advised = page_out(&file_ranges());
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    advised
}

/// `MADV_PAGEOUT` on each range; returns the bytes advised.
fn page_out(ranges: &[(usize, usize)]) -> usize {
    let mut advised = 0;
    for &(start, len) in ranges {
        // SAFETY: (start, len) is a whole read-only, file-backed mapping of this process, read
        // from /proc/self/maps; MADV_PAGEOUT only drops clean pages, which the kernel reads
        // back from the file on the next access: no memory changes.
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
    fn only_read_only_file_mappings() {
        let exe = super::executable_ranges();
        assert!(!exe.is_empty(), "the test binary maps itself");
        let files = super::file_ranges();
        assert!(exe.iter().all(|r| files.contains(r)));
        assert!(files.len() > exe.len(), "libc is mapped too");
        // The process keeps running normally afterwards (its code is faulted back in), and
        // its heap keeps what it holds.
        let kept = vec![7u8; 1 << 20];
        super::release_cold_pages();
        assert_eq!(super::executable_ranges(), exe);
        assert!(kept.iter().all(|&b| b == 7));
    }
}
