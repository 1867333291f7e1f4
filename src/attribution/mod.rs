//! Who holds a GPU beyond its PIDs: the container, Kubernetes pod and Slurm job of each
//! process, from what the node itself says (`/proc/PID/cgroup` now; the kubelet's
//! pod-resources API and Slurm's environment build on it).
//!
//! Invariants: attribution only adds what the evidence shows — a path shape it does not
//! know yields no container, never a guessed one; nothing here runs on a tick's deadline
//! (the resolver reads a process's cgroup once, when it first sees the process).

pub mod cgroup;
pub mod holders;
pub mod kubelet;
pub mod placement;
