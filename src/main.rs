//! The `gpuwatch` binary: a thin shell over the library (see `gpuwatch::cli`).
//! Errors are printed as one line per cause; the exit code says what kind of failure it was.

fn main() {
    std::process::exit(gpuwatch::cli::main());
}
