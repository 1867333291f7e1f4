//! The views: the documents behind `status`, `alerts`, `history` and `gpu audit` — their
//! tables for people and their JSON for programs — rendered by one function each for the
//! command's `--format` and its HTTP twin under `/api/v1/`, with the time-range arguments they
//! share and one error type that `cli` maps to exit codes and `http` to statuses.
//!
//! Invariants: read-only (a view never writes the database); a value not observed prints as
//! `-` (JSON `null`), never 0; a bad request is a [`ViewError::Usage`] naming the flag or
//! parameter, anything else a [`ViewError::Failed`]. Nothing here imports `cli` or `http`.

pub mod alerts;
pub mod api;
pub mod gpu_audit;
pub mod gpus;
pub mod history;
pub mod status;
pub mod status_training;
pub mod timearg;
pub mod usage;

pub use status_training::Joins;

/// Why a view could not be rendered.
#[derive(Debug)]
pub enum ViewError {
    /// The request was wrong (a flag or parameter): exit 2, HTTP 400.
    Usage(anyhow::Error),
    /// Reading or rendering failed: exit 1, HTTP 500.
    Failed(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for ViewError {
    fn from(e: E) -> Self {
        Self::Failed(e.into())
    }
}

impl std::fmt::Display for ViewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Usage(e) | Self::Failed(e) => write!(f, "{e:#}"),
        }
    }
}

impl ViewError {
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Usage(_))
    }

    /// Adds where it happened to a failure; a usage error already names its flag.
    pub fn context(self, c: String) -> Self {
        match self {
            Self::Failed(e) => Self::Failed(e.context(c)),
            usage => usage,
        }
    }

    pub fn into_error(self) -> anyhow::Error {
        match self {
            Self::Usage(e) | Self::Failed(e) => e,
        }
    }
}

/// A bad request.
pub fn usage(e: impl Into<anyhow::Error>) -> ViewError {
    ViewError::Usage(e.into())
}
