-- A state database written by gpufleet 0.1.0 before versioned migrations (schema_version 1): a control plane
-- that took one batch (two incidents), an audit entry, a remediation step, failure and breaker, and a token.
-- Dumped with sqlite3 iterdump; tests load it to check that it is upgraded in place.
BEGIN TRANSACTION;
CREATE TABLE audit (
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
INSERT INTO "audit" VALUES(1,1800000000.0,1.79548470835477256774e+09,'admin','cordon','node/n-001','done','','-','-','-','-',0,'none','');
CREATE TABLE breaker (
    mode TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    since REAL NOT NULL,
    reason TEXT NOT NULL,
    changed_by TEXT NOT NULL
);
INSERT INTO "breaker" VALUES('on','closed',1800000000.0,'','');
CREATE TABLE events (
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
INSERT INTO "events" VALUES(1,'n-001','inc-1',1,1800000000.0,1.79548470835412025447e+09,'n-001','finding','gpu/n-001/3','Xid 79 on gpu/n-001/3','{"type":"finding","time":1800000000.0,"cause":"gpu-lost","entity":{"kind":"gpu","node":"n-001","index":3,"name":""},"severity":"critical","summary":"Xid 79 on gpu/n-001/3","evidence":"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.","source":"kmsg","action":"RESTART_BM","xid":79,"job":null,"effect":false,"began":null}');
INSERT INTO "events" VALUES(2,'n-001','inc-1',2,1800000001.0,1.79548470835412025447e+09,'n-001','finding','gpu/n-001/5','Xid 79 on gpu/n-001/5','{"type":"finding","time":1800000001.0,"cause":"gpu-lost","entity":{"kind":"gpu","node":"n-001","index":5,"name":""},"severity":"critical","summary":"Xid 79 on gpu/n-001/5","evidence":"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.","source":"kmsg","action":"RESTART_BM","xid":79,"job":null,"effect":false,"began":null}');
INSERT INTO "events" VALUES(3,'control','-',0,1800000000.0,1.79548470835444474221e+09,'n-001','incident','gpu/n-001/3','INC-000001 opened: Xid 79 on gpu/n-001/3','{}');
INSERT INTO "events" VALUES(4,'control','-',0,1800000001.0,1.79548470835450863837e+09,'n-001','incident','gpu/n-001/5','INC-000002 opened: Xid 79 on gpu/n-001/5','{}');
CREATE TABLE incidents (
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
INSERT INTO "incidents" VALUES('INC-000001','gpu-lost','gpu/n-001/3','n-001','critical','open',1800000000.0,1800000000.0,1,'{"id": "INC-000001", "cause": "gpu-lost", "entity": {"kind": "gpu", "node": "n-001", "index": 3, "name": ""}, "severity": "critical", "summary": "Xid 79 on gpu/n-001/3", "first_seen": 1800000000.0, "last_seen": 1800000000.0, "state": "open", "count": 1, "evidence": [{"time": 1800000000.0, "source": "kmsg", "text": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}], "effects": [], "action": "RESTART_BM", "xid": 79, "serial": null, "node": "n-001"}');
INSERT INTO "incidents" VALUES('INC-000002','gpu-lost','gpu/n-001/5','n-001','critical','open',1800000001.0,1800000001.0,1,'{"id": "INC-000002", "cause": "gpu-lost", "entity": {"kind": "gpu", "node": "n-001", "index": 5, "name": ""}, "severity": "critical", "summary": "Xid 79 on gpu/n-001/5", "first_seen": 1800000001.0, "last_seen": 1800000001.0, "state": "open", "count": 1, "evidence": [{"time": 1800000001.0, "source": "kmsg", "text": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}], "effects": [], "action": "RESTART_BM", "xid": 79, "serial": null, "node": "n-001"}');
CREATE TABLE inventory (
    node TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    updated REAL NOT NULL,
    body TEXT NOT NULL
);
INSERT INTO "inventory" VALUES('n-001','n-001',1.79548470835412025447e+09,'{"hostname":"n-001","driver":"550.90.07","cuda":"12.4","kernel":"","fabric_manager":"","agent_version":"","gpus":[{"index":0,"uuid":"GPU-0","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":1,"uuid":"GPU-1","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":2,"uuid":"GPU-2","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":3,"uuid":"GPU-3","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":4,"uuid":"GPU-4","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":5,"uuid":"GPU-5","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":6,"uuid":"GPU-6","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null},{"index":7,"uuid":"GPU-7","model":"H100","pci_bus_id":"","serial":"","mig_mode":null,"memory_mib":null}],"ports":[],"labels":{}}');
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema_version','1');
INSERT INTO "meta" VALUES('incident_counter','3');
CREATE TABLE remediation_failures (
    incident TEXT NOT NULL,
    mode TEXT NOT NULL,
    node TEXT NOT NULL,
    time REAL NOT NULL,
    PRIMARY KEY (incident, mode)
);
INSERT INTO "remediation_failures" VALUES('INC-000001','on','n-001',1800000003.0);
CREATE TABLE remediation_steps (
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
INSERT INTO "remediation_steps" VALUES('INC-000001','cordon','on','cordon','node/n-001','done',1800000002.0,'cordoned');
CREATE TABLE streams (
    agent TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    node TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_time REAL NOT NULL,
    PRIMARY KEY (agent, incarnation)
);
INSERT INTO "streams" VALUES('n-001','inc-1','n-001',2,1800000000.0);
CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created REAL NOT NULL,
    created_by TEXT NOT NULL,
    last_used REAL,
    revoked REAL
);
INSERT INTO "tokens" VALUES('b0870d89','ci-bot','operator','f12404c92abea7ebb6cbab2a65e9b61cf5ccef883626c4e4d364639a3248c392',1.79548470835511326786e+09,'admin',NULL,NULL);
CREATE UNIQUE INDEX events_stream ON events(agent, incarnation, seq) WHERE seq > 0;
CREATE INDEX events_kind ON events(kind, id);
CREATE INDEX events_node ON events(node, id);
CREATE INDEX incidents_state ON incidents(state, first_seen);
CREATE INDEX audit_incident ON audit(incident, seq);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE UNIQUE INDEX tokens_secret ON tokens(secret_hash);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('events',4);
INSERT INTO "sqlite_sequence" VALUES('audit',1);
COMMIT;
