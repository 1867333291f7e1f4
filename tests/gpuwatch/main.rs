//! The integration test crate: one binary, a module per area (ripgrep's layout).
//!
//! Every test that needs NVML runs the real nvml-wrapper code against the simulated library
//! (`crates/fake-nvml`), each with its own copy of the library and scenario. The library must
//! be built first (`cargo build --workspace`; scripts/test.sh does it).

mod cli;
mod common;
mod daemon;
mod detection;
mod field_values;
mod layering;
mod outage;
mod pynvml;
mod record;
mod sampler;
