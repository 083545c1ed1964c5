"""Every table of the state database, in one place."""

from __future__ import annotations

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

-- what each agent stream has delivered: a record at or below last_seq is a duplicate
CREATE TABLE IF NOT EXISTS streams (
    agent TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    node TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_time REAL NOT NULL,
    PRIMARY KEY (agent, incarnation)
);

-- durable observations from nodes (kernel reports, link events, findings) and the control plane's own events
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL NOT NULL,
    received REAL NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    entity TEXT NOT NULL,
    message TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_stream ON events(agent, incarnation, seq) WHERE seq > 0;
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, id);
CREATE INDEX IF NOT EXISTS events_node ON events(node, id);

-- the latest inventory each node reported
CREATE TABLE IF NOT EXISTS inventory (
    node TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    updated REAL NOT NULL,
    body TEXT NOT NULL
);

-- incidents: ids are never reused for the life of the database
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    cause TEXT NOT NULL,
    entity TEXT NOT NULL,
    node TEXT NOT NULL,
    severity TEXT NOT NULL,
    state TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    count INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incidents_state ON incidents(state, first_seen);

-- one append-only audit log: people's calls through the API and every remediation decision
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    recorded REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    decision TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    incident TEXT NOT NULL DEFAULT '-',
    cause TEXT NOT NULL DEFAULT '-',
    runbook TEXT NOT NULL DEFAULT '-',
    step TEXT NOT NULL DEFAULT '-',
    dry_run INTEGER NOT NULL DEFAULT 0,
    backend TEXT NOT NULL DEFAULT '',
    request TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_incident ON audit(incident, seq);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;

-- remediation: what each runbook step did, node failures the breaker counts, the breaker itself.
-- `mode` keeps dry-run's own books ('dry-run') apart from real action ('on'), so a dry run meets the same
-- budgets, rate limits and breaker that acting would, without touching the real ones.
CREATE TABLE IF NOT EXISTS remediation_steps (
    incident TEXT NOT NULL,
    step TEXT NOT NULL,
    mode TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    time REAL NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (incident, step, mode)
);
CREATE TABLE IF NOT EXISTS remediation_failures (
    incident TEXT NOT NULL,
    mode TEXT NOT NULL,
    node TEXT NOT NULL,
    time REAL NOT NULL,
    PRIMARY KEY (incident, mode)
);
CREATE TABLE IF NOT EXISTS breaker (
    mode TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    since REAL NOT NULL,
    reason TEXT NOT NULL,
    changed_by TEXT NOT NULL
);

-- API bearer tokens: only a hash of the secret is kept; a revoked token stays listed (the audit names it)
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created REAL NOT NULL,
    created_by TEXT NOT NULL,
    last_used REAL,
    revoked REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS tokens_secret ON tokens(secret_hash);
"""
