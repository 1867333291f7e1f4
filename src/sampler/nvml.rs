//! Loading and initialising NVML, with one-line causes and fixes for every init failure.
//!
//! Invariant: nothing here panics or prints; failures come back as [`InitError`], whose
//! `Display` is a single line naming the cause and the fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::diagnosis::{self, Diagnosis};

/// Why NVML could not be started. The causes and fixes come from the one table of NVML
/// errors ([`super::diagnosis`]), which `gpuwatch doctor` shares.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("cannot load the NVML library {path}: {reason} ({fix})", fix = diagnosis::LIBRARY_NOT_FOUND.fix)]
    LibraryMissing { path: String, reason: String },
    #[error(
        "NVML library {path} lacks the symbol {symbol} (it is not a usable libnvidia-ml.so.1; point `nvml_library` at the driver's)"
    )]
    MissingSymbol { path: String, symbol: String },
    /// `nvmlInit` answered an error.
    #[error("NVML initialisation failed: {0}")]
    Nvml(Diagnosis),
}

impl InitError {
    /// The table's entry for this failure.
    pub fn diagnosis(&self) -> Diagnosis {
        match self {
            Self::LibraryMissing { .. } => diagnosis::LIBRARY_NOT_FOUND,
            Self::MissingSymbol { .. } => diagnosis::FUNCTION_NOT_FOUND,
            Self::Nvml(d) => *d,
        }
    }
}

/// A started NVML with the system-level facts read once at start.
pub struct NvmlHandle {
    pub nvml: Arc<Nvml>,
    pub library: Option<PathBuf>,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub cuda_driver_version: Option<i32>,
}

impl std::fmt::Debug for NvmlHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlHandle")
            .field("library", &self.library)
            .field("driver_version", &self.driver_version)
            .finish_non_exhaustive()
    }
}

/// Loads `library` (or the system's `libnvidia-ml.so.1`) and initialises NVML.
pub fn init(library: Option<&Path>) -> Result<NvmlHandle, InitError> {
    let shown = library.map_or_else(
        || "libnvidia-ml.so.1".to_string(),
        |p| p.display().to_string(),
    );
    if let Some(p) = library
        && !p.exists()
    {
        return Err(InitError::LibraryMissing {
            path: shown,
            reason: "no such file".into(),
        });
    }
    let result = match library {
        Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        None => Nvml::init(),
    };
    let nvml = result.map_err(|e| map_init_error(e, &shown))?;
    Ok(NvmlHandle {
        driver_version: nvml.sys_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        nvml: Arc::new(nvml),
        library: library.map(Path::to_path_buf),
    })
}

fn map_init_error(e: NvmlError, shown: &str) -> InitError {
    match e {
        NvmlError::LibloadingError(le) => InitError::LibraryMissing {
            path: shown.to_string(),
            reason: first_line(&le.to_string()),
        },
        NvmlError::LibraryNotFound => InitError::LibraryMissing {
            path: shown.to_string(),
            reason: "not found".into(),
        },
        NvmlError::FailedToLoadSymbol(s) => InitError::MissingSymbol {
            path: shown.to_string(),
            symbol: symbol_name(&s),
        },
        other => InitError::Nvml(diagnosis::diagnose(&other)),
    }
}

/// A short text for an NVML error; the return codes that nvml-wrapper leaves unmapped are
/// named by the error table's code (`NOT_READY` → "not ready").
pub fn error_text(e: &NvmlError) -> String {
    match (e, diagnosis::diagnose(e)) {
        (NvmlError::UnexpectedVariant(_), d) if d != diagnosis::WRAPPER => d
            .code
            .to_lowercase()
            .replace('_', " ")
            .replace("gpu ", "GPU "),
        (other, _) => first_line(&other.to_string()),
    }
}

/// Errors meaning the GPU itself is gone (fallen off the bus, needs a reset, vanished).
pub fn is_lost(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::GpuLost | NvmlError::ResetRequired | NvmlError::UnexpectedVariant(28)
    )
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// The symbol a failed lookup names: the loader says `<file>: undefined symbol: <name>`, and
/// the file is already shown.
fn symbol_name(s: &str) -> String {
    let line = first_line(s);
    match line.rsplit_once("undefined symbol: ") {
        Some((_, name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => line,
    }
}
