//! Links the `gpuwatch` executable without PIE (as Go builds Prometheus, Alertmanager and
//! dcgm-exporter): its 1.4 MB of pointer tables (`.data.rel.ro`: vtables, static string
//! tables) then need no relocation at start, so they stay clean pages of the file that the
//! kernel may drop, instead of private memory written by the loader in every process
//! (-1.3 MiB anonymous RSS for the daemon, a third of the page faults of a start). Address
//! randomisation still covers the libraries, heap, stacks and mappings. docs/BENCHMARKS.md
//! has the measurements.
//!
//! It also hands the linker `link/hot-functions.txt`, the functions the running daemon
//! executes after start-up (`scripts/hot-functions.sh` counts their calls), so that they are
//! laid out next to each other: the daemon's resident code is then those pages, not every 64 KiB
//! around a hot function scattered over 12 MB of code. The order is a hint: a name that the
//! build does not have is skipped, so a stale list only costs memory, never a build.
//! `GPUWATCH_LINK_MAP=FILE` also writes the linker's map (what `hot-functions.sh` reads).
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-link-arg-bin=gpuwatch=-no-pie");
    println!("cargo:rerun-if-changed=link/hot-functions.txt");
    println!("cargo:rerun-if-env-changed=GPUWATCH_LINK_MAP");
    let target = std::env::var("TARGET").unwrap_or_default();
    // rustc links this target with its own lld (since Rust 1.90), which reads the ordering.
    if target != "x86_64-unknown-linux-gnu" {
        return;
    }
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let order = root.join("link/hot-functions.txt");
    if order.is_file() {
        println!(
            "cargo:rustc-link-arg-bin=gpuwatch=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=gpuwatch=-Wl,--no-warn-symbol-ordering");
    }
    if let Some(map) = std::env::var_os("GPUWATCH_LINK_MAP") {
        println!(
            "cargo:rustc-link-arg-bin=gpuwatch=-Wl,-Map={}",
            PathBuf::from(map).display()
        );
    }
}
