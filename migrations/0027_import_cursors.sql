-- 0027: where a chunked import (`gpuwatch import prometheus`) stands: per source (its URL,
-- selectors and start), the end of the last chunk published. A re-run resumes after it; rows
-- are upserted by time and GPU, so a chunk published twice adds nothing.

CREATE TABLE import_cursors (
    source     TEXT PRIMARY KEY,
    done_to_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
