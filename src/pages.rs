//! Gives back pages the daemon does not use: once it runs, the code and read-only data that
//! only start-up touched (argument parsing, config, migrations, TLS and HTTP client set-up,
//! the kubelet client) stay resident for nothing, and so does what a rare path (a rollup, a
//! scrape, a report of the NVML library) faulted in since. `MADV_PAGEOUT` (Linux 5.4+) on the
//! read-only file mappings — the executable and the shared libraries, NVML's included —
//! reclaims their clean pages; what the daemon keeps running is faulted back in within a tick
//! or two. The daemon does this after 30 ticks and then every ten minutes; the heap's free
//! pages are given back (`malloc_trim`, [`trim_heap`]) with each page-out and every minute
//! between them.
//!
//! A fault maps more than the page it needs: the kernel maps every cached page of the file up
//! to 64 KiB around it (fault-around, a system setting) and reads ahead around a page it has
//! to read (`read_ahead_kb`: 8 MB on some disks). For code the read-ahead happens whatever
//! the mapping's advice (Linux 6.18 ignores `MADV_RANDOM` on executable mappings), so with
//! the executable cached, every hot function keeps the 64 KiB around it resident: scattered
//! over 10 MB of code, a few hundred of them kept ~5 MiB resident. What decides the resident
//! code is therefore where the hot functions lie: `build.rs` has the linker put the ones the
//! running daemon executes (`link/hot-functions.txt`: the ~480 functions a plain daemon calls
//! after start-up, 0.7 MB, then the ~900 more the fleet features call, 1.2 MB) side by side,
//! and the windows around them are then hot code. For the data of the files only the
//! daemon needs — the executable's read-only data and the NVML library —
//! [`own_files_page_by_page`] does stop read-ahead (`MADV_RANDOM`) and drops their cached
//! pages that nothing maps (`MADV_PAGEOUT`, then `POSIX_FADV_DONTNEED`) before any other
//! thread runs: a fault there maps the page it needs, not the 64 KiB around it. The cost:
//! after each page-out the hot pages are read back (a few hundred 4 KiB reads every ten
//! minutes). Shared libraries (libc, libm) are left cached: other processes map them.
//!
//! Invariants: only file-backed mappings are advised and only the read-only ones are paged
//! out (never the heap, a stack or writable data: `MADV_RANDOM`, the only advice a writable
//! mapping gets, changes how much a fault reads, not what it holds), and `malloc_trim` only
//! returns free memory, so nothing can be lost; only clean,
//! unmapped cache pages are dropped, and they are read back from the file when needed; older
//! kernels answer EINVAL and nothing happens.
//!
//! It also owns the daemon's malloc setting: glibc gives every thread that allocates an arena
//! of its own (up to 8 per core), and the daemon's dozen threads each keep their arena's
//! freed, fragmented memory resident — about 5 MiB of RSS on 8 GPUs for no speed the daemon
//! needs (its threads allocate little, and mostly not at the same moment). [`one_malloc_arena`]
//! limits glibc to one arena before any thread starts, and fixes the thresholds at which a
//! large block is mapped on its own and the heap's free top given back.

use std::path::PathBuf;

/// `MADV_PAGEOUT` from `<linux/mman.h>` (libc does not define it for every target).
const MADV_PAGEOUT: libc::c_int = 21;

/// A mapping of a file: start, length and the file.
type Range = (usize, usize, PathBuf);

/// The executable's read-only mappings.
#[cfg(test)]
fn executable_ranges() -> Vec<Range> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    read_only_mappings(|path| path == exe)
}

/// The read-only mappings of files (the executable, shared libraries).
fn file_ranges() -> Vec<Range> {
    read_only_mappings(|path| path.is_absolute())
}

/// The mappings, writable ones too, of the files only the daemon needs: its executable and the
/// NVML library (`libnvidia-ml.so*`, wherever it was loaded from).
fn own_file_ranges() -> Vec<(Range, bool)> {
    let exe = std::fs::read_link("/proc/self/exe").ok();
    mappings(|path| {
        exe.as_deref() == Some(path)
            || path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvidia-ml.so"))
    })
}

/// The read-only mappings of the files `wanted` selects.
fn read_only_mappings(wanted: impl Fn(&std::path::Path) -> bool) -> Vec<Range> {
    mappings(wanted)
        .into_iter()
        .filter(|(_, writable)| !writable)
        .map(|(r, _)| r)
        .collect()
}

/// The mappings of the files `wanted` selects, each with whether it is writable.
fn mappings(wanted: impl Fn(&std::path::Path) -> bool) -> Vec<(Range, bool)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some(path) = f.nth(3).map(PathBuf::from) else {
            continue;
        };
        if !wanted(&path) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            && b > a
        {
            out.push(((a, b - a, path), perms.contains('w')));
        }
    }
    out
}

/// Reclaims the clean pages of the executable's and the libraries' read-only mappings and
/// the heap's free memory; returns the bytes advised.
pub fn release_cold_pages() -> usize {
    // The daemon's own files first, their dropped pages right after: the fewer pages the
    // other threads fault back in between, the fewer large folios stay cached.
    let own = own_file_ranges();
    let own_bytes = page_by_page(&own);
    // The other files' (shared libraries'); the daemon's own were paged out just above.
    let others: Vec<Range> = file_ranges()
        .into_iter()
        .filter(|(_, _, path)| !own.iter().any(|((_, _, p), _)| p == path))
        .collect();
    let advised = own_bytes + page_out(&others);
    trim_heap();
    advised
}

/// The heap's bytes in use, free (within the heap) and in mmapped blocks, from glibc
/// (`mallinfo2`); `None` with another C library.
pub fn heap_bytes() -> Option<(usize, usize, usize)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads malloc's counters.
        let m = unsafe { libc::mallinfo2() };
        Some((m.uordblks, m.fordblks, m.hblkhd))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// Gives the heap's free pages back to the system (`malloc_trim`: the free chunks' whole
/// pages, wherever they lie in the heap, not only its top). With glibc only; a no-op elsewhere.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Makes the daemon's executable and the NVML library (once loaded) resident page by page:
/// no read-ahead, and their cached pages that nothing maps dropped, so that a fault maps the
/// page it needs instead of the cached pages around it. Called before any other thread runs,
/// and again with every [`release_cold_pages`] (the NVML library is loaded later).
pub fn own_files_page_by_page() {
    page_by_page(&own_file_ranges());
}

/// `MADV_RANDOM` on every mapping (a fault in any of them would otherwise read ahead into
/// the cache the others fault around in: the executable's data segment is a writable mapping
/// of the same file), `MADV_PAGEOUT` on the read-only ones, then the files' unmapped cached
/// pages dropped; returns the bytes paged out.
fn page_by_page(mappings: &[(Range, bool)]) -> usize {
    use std::os::fd::AsRawFd;
    let mut paths: Vec<&PathBuf> = mappings.iter().map(|((_, _, p), _)| p).collect();
    paths.sort();
    paths.dedup();
    // Opened first: between the page-out and the drop below, the code this thread runs is
    // the few instructions of these loops, and a page it faults back keeps its whole large
    // folio cached.
    let files: Vec<std::fs::File> = paths
        .iter()
        .filter_map(|p| std::fs::File::open(p).ok())
        .collect();
    for ((start, len, _), _) in mappings {
        // SAFETY: (start, len) is a whole file-backed mapping of this process; MADV_RANDOM
        // only changes how much the kernel reads on a fault.
        unsafe {
            libc::madvise(*start as *mut libc::c_void, *len, libc::MADV_RANDOM);
        }
    }
    let read_only: Vec<Range> = mappings
        .iter()
        .filter(|(_, writable)| !writable)
        .map(|(r, _)| r.clone())
        .collect();
    let paged = page_out(&read_only);
    for f in &files {
        // SAFETY: the descriptor is open for the call; the advice only drops clean, unmapped
        // cached pages of the file, which are read back from it when needed.
        unsafe {
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
    paged
}

/// `MADV_PAGEOUT` on each range; returns the bytes advised.
fn page_out(ranges: &[Range]) -> usize {
    let mut advised = 0;
    for (start, len, _) in ranges {
        // SAFETY: (start, len) is a whole read-only, file-backed mapping of this process, read
        // from /proc/self/maps; MADV_PAGEOUT only drops clean pages, which the kernel reads
        // back from the file on the next access: no memory changes.
        let rc = unsafe { libc::madvise(*start as *mut libc::c_void, *len, MADV_PAGEOUT) };
        if rc == 0 {
            advised += *len;
        }
    }
    advised
}

/// Blocks at least this large that the heap's free top cannot hold are mapped on their own.
const MMAP_THRESHOLD: libc::c_int = 64 * 1024;

/// Makes glibc's malloc serve every thread from the main arena (`M_ARENA_MAX` = 1), and fixes
/// its thresholds (`M_MMAP_THRESHOLD` = 64 KiB). By default glibc maps a block of 128 KiB or
/// more that the heap cannot hold on its own, and raises that threshold to the size of each
/// mapped block freed (up to 32 MiB) and the one for giving back the heap's free top to twice
/// that: after the first history document, scrape answer or remote-write snapshot (70–200
/// KiB, every 15 to 60 s) is freed, the next ones grow the heap, and what they leave there
/// stays resident. Fixed, such blocks are mapped and unmapped when freed, and a free top above
/// 128 KiB is given back (about 1 MiB less at the hour with the fleet features on). A block
/// allocated and freed again and again at that size is mapped afresh each time: the scrape
/// keeps its answer's buffer (`http::metrics::Scraper`) and SQLite's page caches start
/// without a bulk block (`.cargo/config.toml`), so a scrape maps nothing (docs/BENCHMARKS.md
/// §7). Called by the daemon commands before they start a thread; other C
/// libraries are left as they are.
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tuning; it is called before any other thread
    // exists, M_ARENA_MAX takes any positive value and M_MMAP_THRESHOLD any up to 32 MiB.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
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

    /// Pages of `len` bytes at `base` that are in the page cache (mincore).
    fn cached_pages(base: *mut libc::c_void, len: usize) -> usize {
        let mut vec = vec![0u8; len / 4096];
        // SAFETY: (base, len) is a live mapping of the test; vec has one byte per page.
        let rc = unsafe { libc::mincore(base, len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore");
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// With the whole file cached, touching a few scattered pages maps whole runs of cached
    /// pages around each; after `page_by_page` the cache holds the pages touched since, and
    /// reading them back gives the same bytes.
    #[test]
    fn page_by_page_keeps_only_the_pages_touched() {
        use std::io::Write;
        const PAGES: usize = 1024;
        // Beside the test binary: a disk-backed file system (tmpfs pages cannot be dropped).
        let dir = std::env::current_exe().expect("exe");
        let dir = dir.parent().expect("exe dir");
        let mut file = tempfile::NamedTempFile::new_in(dir).expect("temp file");
        let data: Vec<u8> = (0..PAGES * 4096).map(|i| (i / 4096) as u8).collect();
        file.write_all(&data).expect("write");
        file.as_file().sync_all().expect("sync");
        let len = data.len();
        let fd = std::os::fd::AsRawFd::as_raw_fd(file.as_file());
        // SAFETY: a private read-only mapping of the whole file, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                fd,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let page = |i: usize| {
            // SAFETY: i < PAGES: inside the mapping.
            unsafe { std::ptr::read_volatile((base as *const u8).add(i * 4096)) }
        };
        let touched: Vec<usize> = (0..PAGES).step_by(97).collect();
        (0..PAGES).for_each(|i| {
            page(i);
        });
        assert_eq!(
            cached_pages(base, len),
            PAGES,
            "all cached after a full read"
        );
        let range = ((base as usize, len, file.path().to_path_buf()), false);
        super::page_by_page(std::slice::from_ref(&range));
        for &i in &touched {
            assert_eq!(page(i), i as u8);
        }
        let cached = cached_pages(base, len);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base, len) };
        assert!(
            cached <= 2 * touched.len(),
            "{cached} pages cached after touching {}",
            touched.len()
        );
    }
}
