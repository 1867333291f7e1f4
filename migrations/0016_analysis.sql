-- Incident analysis: each request `gpuwatch incident ID --explain` (or the daemon's
-- follow-up) sent to a language model, stored with the alert so a person can audit exactly
-- what left the node (`gpuwatch incident ID --show-prompt`), and the answer or the failure.

CREATE TABLE analysis_requests (
    id           INTEGER PRIMARY KEY,
    alert_id     INTEGER NOT NULL,  -- alert_state.id
    created_ms   INTEGER NOT NULL,
    endpoint     TEXT    NOT NULL,  -- the URL the request was POSTed to (no credentials)
    model        TEXT    NOT NULL,
    request_json TEXT    NOT NULL,  -- the exact body sent, after redaction
    status       TEXT    NOT NULL,  -- pending | answered | failed
    answer       TEXT,              -- the model's text (answered)
    error        TEXT,              -- one line (failed)
    done_ms      INTEGER
);
CREATE INDEX analysis_requests_alert ON analysis_requests (alert_id, id);
