-- 0013: XIDs from the kernel log. NVML's event API says which XID happened on which GPU; the
-- kernel log (`NVRM: Xid (PCI:0000:19:00): 48, pid=..., name=..., message`) also says who
-- caused it and what the driver saw, and it is all a saved dmesg holds. Both land in
-- `events` (kind 'xid'); the same XID from both is one row.
--
-- * pci_bus_id: the GPU's PCI address as the kernel prints it, normalised to
--   `dddd:bb:dd` (domain:bus:device, lower case); NULL for NVML's events. A kernel-log XID
--   whose GPU is known only by this address has gpu_id NULL until an inventory (or an
--   `NVRM: GPU at PCI:... GPU-<uuid>` line) names the GPU at that address.
-- * source: 'nvml' (event API), 'kmsg' (the daemon following /dev/kmsg), 'import'
--   (`gpuwatch import dmesg`), or 'nvml+kmsg' / 'nvml+import' when both saw the same XID;
--   NULL for the events gpuwatch raises itself (gpu_lost, inventory_changed, ...).
-- * kernel_ms: when the kernel logged it (ms UTC, from its own timestamp); NULL for NVML's.
--   `ts_ms` stays the time the event entered the history (the daemon's tick that picked it
--   up), so rules see every event in time order; an import has no tick: ts_ms = kernel_ms.

ALTER TABLE events ADD COLUMN pci_bus_id TEXT;
ALTER TABLE events ADD COLUMN source TEXT;
ALTER TABLE events ADD COLUMN kernel_ms INTEGER;

-- Every XID stored before this version came through NVML's event API.
UPDATE events SET source = 'nvml' WHERE kind = 'xid';

-- Finding the same XID from the other source, and the newest XID at start-up.
CREATE INDEX events_xid ON events (host_id, code, ts_ms) WHERE kind = 'xid';
-- Kernel-log XIDs waiting for their GPU.
CREATE INDEX events_unjoined ON events (host_id, pci_bus_id) WHERE gpu_id IS NULL;

DROP VIEW gpu_events;
CREATE VIEW gpu_events AS
SELECT e.id AS event_id,
       e.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       e.kind, e.code, e.message,
       e.pci_bus_id,
       e.source,
       e.kernel_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.kernel_ms / 1000.0, 'unixepoch') AS kernel_utc
FROM events e
JOIN hosts h ON h.id = e.host_id
LEFT JOIN gpus g ON g.id = e.gpu_id;
