-- 0025: taking a broken GPU's node out of service ([remediation], docs/REMEDIATION.md).
-- Every decision of `gpuwatch gpu health --slurm` and of the daemon is a row, acted or not:
-- `result` is `attempted` before the command or request (updated with its outcome after, so
-- an action whose outcome never came back stays visible), `done`, `failed`, `dry_run` (what
-- would have been done), `refused_breaker` (the hour's limit was reached), `skipped_resumed`
-- (a person put the node back after gpuwatch took it out for the same fault),
-- `resumed_by_person` (that resume, seen: the node in service again without gpuwatch doing
-- it) or `already_out` (the node was already drained or marked). The breaker and the
-- resume rule read these rows, so they hold across restarts. Rows are never deleted.

CREATE TABLE remediation_log (
    id        INTEGER PRIMARY KEY,
    ts_ms     INTEGER NOT NULL,
    done_ms   INTEGER,
    who       TEXT NOT NULL,
    uid       INTEGER,
    node      TEXT NOT NULL,
    action    TEXT NOT NULL,
    fault     TEXT NOT NULL,
    gpu_uuid  TEXT,
    source    TEXT NOT NULL,
    reason    TEXT NOT NULL,
    dry_run   INTEGER NOT NULL,
    result    TEXT NOT NULL,
    error     TEXT
);
CREATE INDEX remediation_log_node_ts ON remediation_log (node, ts_ms);

CREATE VIEW remediation_audit AS
SELECT id, ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', ts_ms / 1000.0, 'unixepoch') AS time_utc,
       done_ms, who, uid, node, action, fault, gpu_uuid, source, reason,
       dry_run, result, error
FROM remediation_log;
