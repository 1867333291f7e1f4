//! Who the imported rows belong to: hosts, GPUs (by uuid, or by host + index when the uuid is
//! missing or masked), processes, and the GPU references of `--query-compute-apps` rows.
//!
//! Invariants:
//! - A real uuid identifies a GPU within its host. A missing or masked uuid (only zeros, e.g.
//!   `GPU-00000000-0000-0000-0000-000000000000`) falls back to host + index, stored under the
//!   stand-in uuid `index-N` (or the uuid of the one stored GPU of the host with that index);
//!   a section without an index column is one GPU, index 0.
//! - A compute-apps row names its GPU by uuid and/or PCI bus id; it is resolved after every
//!   file is read: a real uuid the import or the database knows, then bus id, then "the
//!   host's only GPU", then (for a host with no GPU at all) its uuid; otherwise its rows are
//!   not imported and are reported.
//! - Inventory values keep the newest non-NULL value seen. `temperature.gpu.tlimit` is the
//!   margin to T.Limit, the maximum operating temperature (as recent drivers report it, see
//!   `crate::specs`): T.Limit = `temperature.gpu + temperature.gpu.tlimit` (the most frequent
//!   value per GPU) is stored as the max operating temperature, the slowdown and shutdown
//!   thresholds as far above it as the model table says for the model (slowdown 2 °C above
//!   on every capture of that scale, the default for other models; shutdown only where known).

use std::collections::HashMap;

use crate::model::{GpuInventory, TsMs};
use crate::store::import::{ImportGpu, ImportPlan, ImportProcess, StoredGpu};

/// True for a uuid that carries no identity (all zeros, as collectors mask them).
pub fn is_masked(uuid: &str) -> bool {
    let rest = uuid
        .strip_prefix("GPU-")
        .or_else(|| uuid.strip_prefix("MIG-"))
        .unwrap_or(uuid);
    rest.bytes().all(|c| c == b'0' || c == b'-')
}

/// A PCI bus id in one spelling: 8-digit domain, upper case (`00000000:83:00.0`).
pub fn normalize_bus_id(s: &str) -> String {
    match s.split_once(':') {
        Some((dom, rest)) => match u32::from_str_radix(dom, 16) {
            Ok(d) => format!("{d:08X}:{}", rest.to_ascii_uppercase()),
            Err(_) => s.to_ascii_uppercase(),
        },
        None => s.to_ascii_uppercase(),
    }
}

/// One GPU being imported.
#[derive(Debug, Default)]
pub struct GpuAcc {
    pub gpu: ImportGpu,
    pub rows: u64,
    tlimit_votes: HashMap<i64, u64>,
}

impl GpuAcc {
    pub fn inv(&mut self) -> &mut GpuInventory {
        &mut self.gpu.inventory
    }

    /// Widens the GPU's time span.
    pub fn seen(&mut self, ts: TsMs) {
        self.gpu.first_ms = self.gpu.first_ms.min(ts);
        self.gpu.last_ms = self.gpu.last_ms.max(ts);
    }

    /// A sample at `ts` was staged.
    pub fn sampled(&mut self, ts: TsMs) {
        self.seen(ts);
        self.rows += 1;
        self.gpu.last_sample_ms = Some(self.gpu.last_sample_ms.map_or(ts, |l| l.max(ts)));
    }

    /// T.Limit as one row says it: `temperature.gpu` + `temperature.gpu.tlimit`.
    pub fn vote_tlimit(&mut self, tlimit_c: i64) {
        *self.tlimit_votes.entry(tlimit_c).or_default() += 1;
    }
}

#[derive(Debug)]
struct GpuRef {
    host: usize,
    uuid: Option<String>,
    bus: Option<String>,
    /// `file:line` of its first row, and how many rows use it.
    first_at: String,
    rows: u64,
}

/// Process rows that could not be tied to a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Unresolved {
    pub first_at: String,
    pub rows: u64,
    pub what: String,
}

/// Hosts, GPUs, processes and GPU references of one import.
#[derive(Debug, Default)]
pub struct Registry {
    pub hosts: Vec<String>,
    pub gpus: Vec<GpuAcc>,
    by_uuid: Vec<HashMap<String, usize>>,
    by_index: Vec<HashMap<u32, usize>>,
    stored: Vec<Vec<StoredGpu>>,
    pub procs: Vec<ImportProcess>,
    by_pid: HashMap<(usize, u32), usize>,
    refs: Vec<GpuRef>,
    by_ref: HashMap<(usize, Option<String>, Option<String>), usize>,
    /// Hosts with a `--query-compute-apps` section in this import: their processes were
    /// observed (a poll without a row means no process), so their samples get counts.
    apps: Vec<usize>,
}

impl Registry {
    /// A `--query-compute-apps` section of `host` was read.
    pub fn saw_apps(&mut self, host: usize) {
        if !self.apps.contains(&host) {
            self.apps.push(host);
        }
    }

    /// The id of host `name`; `stored` lists what the database already holds for it (asked
    /// only for a host not seen yet).
    pub fn host(&mut self, name: &str, stored: impl FnOnce() -> Vec<StoredGpu>) -> usize {
        if let Some(i) = self.hosts.iter().position(|h| h == name) {
            return i;
        }
        self.stored.push(stored());
        self.hosts.push(name.to_string());
        self.by_uuid.push(HashMap::new());
        self.by_index.push(HashMap::new());
        self.hosts.len() - 1
    }

    fn new_gpu(&mut self, host: usize, uuid: String, index: Option<u32>, ts: TsMs) -> usize {
        let id = self.gpus.len();
        self.by_uuid[host].insert(uuid.clone(), id);
        self.gpus.push(GpuAcc {
            gpu: ImportGpu {
                host,
                inventory: GpuInventory {
                    index: index.unwrap_or(0),
                    uuid,
                    ..GpuInventory::default()
                },
                index_known: index.is_some(),
                first_ms: ts,
                last_ms: ts,
                last_sample_ms: None,
            },
            ..GpuAcc::default()
        });
        id
    }

    /// The GPU of a `--query-gpu` row: by real uuid, else by index (`None`: the section has no
    /// index column, so it is one GPU).
    pub fn gpu(&mut self, host: usize, uuid: Option<&str>, index: Option<u32>, ts: TsMs) -> usize {
        if let Some(u) = uuid.filter(|u| !is_masked(u)) {
            if let Some(&id) = self.by_uuid[host].get(u) {
                return id;
            }
            let id = self.new_gpu(host, u.to_string(), index, ts);
            return id;
        }
        let key = index.unwrap_or(0);
        if let Some(&id) = self.by_index[host].get(&key) {
            return id;
        }
        let stored: Vec<&StoredGpu> = self.stored[host]
            .iter()
            .filter(|g| g.index == Some(key))
            .collect();
        let uuid = match stored.as_slice() {
            [one] => one.uuid.clone(),
            _ => format!("index-{key}"),
        };
        let id = match self.by_uuid[host].get(&uuid) {
            Some(&id) => id,
            None => self.new_gpu(host, uuid, index, ts),
        };
        self.by_index[host].insert(key, id);
        id
    }

    /// The process `pid` of `host` (start time unknown).
    pub fn process(&mut self, host: usize, pid: u32, name: Option<&str>, ts: TsMs) -> usize {
        let id = *self.by_pid.entry((host, pid)).or_insert_with(|| {
            self.procs.push(ImportProcess {
                host,
                pid,
                name: None,
                first_ms: ts,
                last_ms: ts,
            });
            self.procs.len() - 1
        });
        let p = &mut self.procs[id];
        p.first_ms = p.first_ms.min(ts);
        p.last_ms = p.last_ms.max(ts);
        if let Some(n) = name
            && p.name.as_deref() != Some(n)
        {
            p.name = Some(n.to_string());
        }
        id
    }

    /// The GPU reference of a compute-apps row (resolved in [`Registry::plan`]).
    pub fn gpu_ref(
        &mut self,
        host: usize,
        uuid: Option<&str>,
        bus: Option<&str>,
        at: impl FnOnce() -> String,
    ) -> usize {
        let uuid = uuid.filter(|u| !is_masked(u)).map(str::to_string);
        let bus = bus.map(normalize_bus_id);
        let key = (host, uuid, bus);
        if let Some(&id) = self.by_ref.get(&key) {
            self.refs[id].rows += 1;
            return id;
        }
        self.refs.push(GpuRef {
            host,
            uuid: key.1.clone(),
            bus: key.2.clone(),
            first_at: at(),
            rows: 1,
        });
        self.by_ref.insert(key, self.refs.len() - 1);
        self.refs.len() - 1
    }

    fn resolve(&mut self, r: usize, ts: TsMs) -> Option<usize> {
        let (host, uuid, bus) = {
            let g = &self.refs[r];
            (g.host, g.uuid.clone(), g.bus.clone())
        };
        // A uuid names a GPU only if this import or the database knows it: a GPU log without
        // a uuid column keys its GPUs by index, and the same GPU must not appear twice.
        let known_uuid = uuid.as_ref().filter(|u| {
            self.by_uuid[host].contains_key(u.as_str())
                || self.stored[host].iter().any(|g| &g.uuid == *u)
        });
        if let Some(u) = known_uuid.cloned() {
            return Some(self.gpu(host, Some(&u), None, ts));
        }
        if let Some(b) = &bus {
            let imported: Vec<usize> = (0..self.gpus.len())
                .filter(|&i| {
                    let g = &self.gpus[i].gpu;
                    g.host == host
                        && g.inventory
                            .pci_bus_id
                            .as_deref()
                            .map(normalize_bus_id)
                            .as_ref()
                            == Some(b)
                })
                .collect();
            if let [one] = imported.as_slice() {
                return Some(*one);
            }
            let stored: Vec<String> = self.stored[host]
                .iter()
                .filter(|g| g.pci_bus_id.as_deref().map(normalize_bus_id).as_ref() == Some(b))
                .map(|g| g.uuid.clone())
                .collect();
            if let [one] = stored.as_slice() {
                return Some(self.gpu(host, Some(one), None, ts));
            }
        }
        let mut all: Vec<&str> = self
            .gpus
            .iter()
            .filter(|g| g.gpu.host == host)
            .map(|g| g.gpu.inventory.uuid.as_str())
            .chain(self.stored[host].iter().map(|g| g.uuid.as_str()))
            .collect();
        all.sort_unstable();
        all.dedup();
        match all.as_slice() {
            [one] => {
                let one = one.to_string();
                match self.by_uuid[host].get(&one) {
                    Some(&id) => Some(id),
                    None => Some(self.gpu(host, Some(&one), None, ts)),
                }
            }
            // A compute-apps log of a host with no GPU log at all: its uuid is the GPU.
            [] => uuid.map(|u| self.gpu(host, Some(&u), None, ts)),
            _ => None,
        }
    }

    /// Resolves the GPU references and finishes the inventories; returns the plan to publish
    /// and the process rows that belong to no known GPU.
    pub fn plan(mut self) -> (ImportPlan, Vec<Unresolved>) {
        let mut gpu_refs = Vec::with_capacity(self.refs.len());
        let mut unresolved = Vec::new();
        for r in 0..self.refs.len() {
            let ts = self
                .procs
                .iter()
                .filter(|p| p.host == self.refs[r].host)
                .map(|p| p.first_ms)
                .min()
                .unwrap_or(0);
            let g = self.resolve(r, ts);
            if g.is_none() {
                let x = &self.refs[r];
                unresolved.push(Unresolved {
                    first_at: x.first_at.clone(),
                    rows: x.rows,
                    what: format!(
                        "cannot tell which GPU of host `{}` the process rows belong to (uuid {}, bus id {}): import the --query-gpu log of the same machine with the same --host",
                        self.hosts[x.host],
                        x.uuid.as_deref().unwrap_or("masked or missing"),
                        x.bus.as_deref().unwrap_or("missing")
                    ),
                });
            }
            gpu_refs.push(g);
        }
        let gpus = self
            .gpus
            .into_iter()
            .map(|mut acc| {
                if let Some((&t, _)) = acc
                    .tlimit_votes
                    .iter()
                    .max_by_key(|(t, n)| (**n, std::cmp::Reverse(**t)))
                {
                    thresholds_from_tlimit(&mut acc.gpu.inventory, t);
                }
                acc.gpu
            })
            .collect();
        let mut processes_observed = vec![false; self.hosts.len()];
        for h in self.apps {
            processes_observed[h] = true;
        }
        let plan = ImportPlan {
            processes_observed,
            hosts: self.hosts,
            gpus,
            processes: self.procs,
            gpu_refs,
            ..ImportPlan::default()
        };
        (plan, unresolved)
    }
}

/// The thresholds a T.Limit of `tlimit_c` °C gives (see the module doc): the slowdown and
/// shutdown thresholds sit as far above T.Limit as the model table says for the model (2 °C
/// for slowdown on the T.Limit scale of every capture; the shutdown offset only where known).
fn thresholds_from_tlimit(inv: &mut GpuInventory, tlimit_c: i64) {
    let Ok(tlimit) = u32::try_from(tlimit_c) else {
        return;
    };
    let spec = inv.name.as_deref().and_then(crate::specs::lookup);
    let above = |t: Option<u32>| spec.and_then(|m| t?.checked_sub(m.temp_max_c?));
    inv.temp_gpu_max_c = Some(tlimit);
    inv.temp_slowdown_c = Some(
        tlimit
            + above(spec.and_then(|m| m.temp_slowdown_c))
                .unwrap_or(crate::specs::SLOWDOWN_ABOVE_TLIMIT_C),
    );
    inv.temp_shutdown_c = above(spec.and_then(|m| m.temp_shutdown_c)).map(|d| tlimit + d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_uuids_and_bus_ids() {
        assert!(is_masked("GPU-00000000-0000-0000-0000-000000000000"));
        assert!(!is_masked("GPU-5f1c2a9e-0000-0000-0000-000000000000"));
        assert_eq!(normalize_bus_id("0000:83:00.0"), "00000000:83:00.0");
        assert_eq!(normalize_bus_id("00000000:0c:00.0"), "00000000:0C:00.0");
    }

    #[test]
    fn identity_by_uuid_or_index() {
        let mut r = Registry::default();
        let h = r.host("a", Vec::new);
        let masked = "GPU-00000000-0000-0000-0000-000000000000";
        let g0 = r.gpu(h, Some(masked), Some(0), 1);
        let g1 = r.gpu(h, Some(masked), Some(1), 1);
        assert_ne!(g0, g1);
        assert_eq!(r.gpu(h, None, Some(1), 2), g1);
        assert_eq!(r.gpus[g1].gpu.inventory.uuid, "index-1");
        let real = r.gpu(h, Some("GPU-abc"), Some(0), 3);
        assert_ne!(real, g0);
        let b = r.host("b", Vec::new);
        assert_ne!(r.gpu(b, Some(masked), Some(0), 1), g0);
    }
}
