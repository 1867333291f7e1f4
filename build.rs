//! Links the `gpuwatch` executable without PIE (as Go builds Prometheus, Alertmanager and
//! dcgm-exporter): its 1.4 MB of pointer tables (`.data.rel.ro`: vtables, static string
//! tables) then need no relocation at start, so they stay clean pages of the file that the
//! kernel may drop, instead of private memory written by the loader in every process
//! (-1.3 MiB anonymous RSS for the daemon, a third of the page faults of a start). Address
//! randomisation still covers the libraries, heap, stacks and mappings. docs/BENCHMARKS.md
//! has the measurements.
fn main() {
    println!("cargo:rustc-link-arg-bin=gpuwatch=-no-pie");
}
