//! `gpuwatch doctor` against fixture host trees (module version files with real content,
//! library symlink chains, an `ld.so.cache` written by `ldconfig`, device nodes — symlinks to
//! `/dev/null`, a real character device, or real NVIDIA nodes made with `mknod` that the
//! doctor, run as `nobody`, may not open — and missing or wrong ones) and the simulated NVML
//! library with its scenario's errors and modes. Every test runs the real binary and checks the text, the
//! JSON document and the exit code. Every FAIL and warn of the doctor has a fixture here:
//! `kernel` (module, device nodes, nodes against NVML), `library` (the loader's search,
//! ld.so.cache, symlinks, versions), `nvml` (init and every GPU's checks), `setup` (config,
//! database, attribution, and a first pass over the rest) and `services` (rules, kubelet,
//! receivers).
//!
//! The fake library (`cargo build --workspace`; scripts/test.sh does it) is copied into each
//! fixture as `libnvidia-ml.so.<version>`, next to its scenario.

pub mod fixture;
mod kernel;
mod library;
mod nvml;
mod services;
mod setup;
