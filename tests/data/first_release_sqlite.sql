-- The schema of gridcrawl's first release (commit a4f12eb, SCHEMA_VERSION 1) for sqlite,
-- rendered from that release's gridcrawl/models.py: tests/test_migrations.py upgrades it.
CREATE TABLE application (
	application_id VARCHAR(36) NOT NULL, 
	state SMALLINT NOT NULL, 
	time_created DATETIME NOT NULL, 
	time_completed DATETIME, 
	usr_name VARCHAR(64) NOT NULL, 
	application_name VARCHAR(255) NOT NULL, 
	PRIMARY KEY (application_id)
);
CREATE TABLE executor (
	executor_id VARCHAR(36) NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	is_dedicated BOOLEAN NOT NULL, 
	is_connected BOOLEAN NOT NULL, 
	accepting BOOLEAN NOT NULL, 
	ping_time DATETIME, 
	time_registered DATETIME, 
	host VARCHAR(255) NOT NULL, 
	port INTEGER, 
	usr_name VARCHAR(64) NOT NULL, 
	threads INTEGER NOT NULL, 
	cpu_max FLOAT NOT NULL, 
	cpu_usage FLOAT NOT NULL, 
	cpu_avail FLOAT NOT NULL, 
	cpu_totalusage FLOAT NOT NULL, 
	mem_max BIGINT NOT NULL, 
	mem_usage BIGINT NOT NULL, 
	num_cpus INTEGER NOT NULL, 
	pages_per_second FLOAT NOT NULL, 
	arch VARCHAR(64) NOT NULL, 
	os VARCHAR(64) NOT NULL, 
	PRIMARY KEY (executor_id)
);
CREATE TABLE manager_meta (
	name VARCHAR(64) NOT NULL, 
	value VARCHAR(1024) NOT NULL, 
	PRIMARY KEY (name)
);
CREATE TABLE thread (
	internal_thread_id BIGINT NOT NULL, 
	application_id VARCHAR(36) NOT NULL, 
	thread_id BIGINT NOT NULL, 
	executor_id VARCHAR(36), 
	state SMALLINT NOT NULL, 
	url VARCHAR(2083) NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	depth INTEGER NOT NULL, 
	priority INTEGER NOT NULL, 
	failed BOOLEAN NOT NULL, 
	attempts INTEGER NOT NULL, 
	error_kind VARCHAR(32), 
	time_submitted DATETIME NOT NULL, 
	time_started DATETIME, 
	time_finished DATETIME, 
	PRIMARY KEY (internal_thread_id), 
	FOREIGN KEY(application_id) REFERENCES application (application_id), 
	FOREIGN KEY(executor_id) REFERENCES executor (executor_id)
);
CREATE INDEX ix_thread_executor ON thread (executor_id);
CREATE UNIQUE INDEX ux_thread_application_thread ON thread (application_id, thread_id);
CREATE INDEX ix_thread_state ON thread (state);
CREATE TABLE attempt (
	attempt_id BIGINT NOT NULL, 
	internal_thread_id BIGINT NOT NULL, 
	executor_id VARCHAR(36) NOT NULL, 
	time_assigned DATETIME NOT NULL, 
	time_started DATETIME, 
	time_finished DATETIME, 
	outcome VARCHAR(16) NOT NULL, 
	PRIMARY KEY (attempt_id), 
	FOREIGN KEY(internal_thread_id) REFERENCES thread (internal_thread_id), 
	FOREIGN KEY(executor_id) REFERENCES executor (executor_id)
);
CREATE INDEX ix_attempt_thread ON attempt (internal_thread_id);
CREATE INDEX ix_attempt_executor ON attempt (executor_id);
INSERT INTO manager_meta (name, value) VALUES ('schema_version', '1');
CREATE TABLE crawl_meta (
	name VARCHAR(64) NOT NULL, 
	value VARCHAR(1024) NOT NULL, 
	PRIMARY KEY (name)
);
CREATE TABLE document (
	doc_id INTEGER NOT NULL, 
	url VARCHAR(2083) NOT NULL, 
	fingerprint VARCHAR(32) NOT NULL, 
	final_url VARCHAR(2083) NOT NULL, 
	status INTEGER, 
	content_type VARCHAR(255), 
	size BIGINT NOT NULL, 
	title TEXT, 
	encoding VARCHAR(64), 
	content TEXT, 
	body BLOB, 
	depth INTEGER NOT NULL, 
	fetched_at DATETIME NOT NULL, 
	executor VARCHAR(36), 
	fetch_seconds FLOAT NOT NULL, 
	parse_seconds FLOAT NOT NULL, 
	PRIMARY KEY (doc_id)
);
CREATE UNIQUE INDEX ux_document_fingerprint ON document (fingerprint);
CREATE TABLE to_visit_url (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	url VARCHAR(2083) NOT NULL, 
	fingerprint VARCHAR(32) NOT NULL, 
	depth INTEGER NOT NULL, 
	priority INTEGER NOT NULL, 
	discovered_from VARCHAR(2083), 
	in_flight BOOLEAN NOT NULL
);
CREATE UNIQUE INDEX ux_to_visit_url_fingerprint ON to_visit_url (fingerprint);
CREATE INDEX ix_to_visit_url_queue ON to_visit_url (in_flight, priority, id);
CREATE TABLE visited_url (
	id INTEGER NOT NULL, 
	url VARCHAR(2083) NOT NULL, 
	fingerprint VARCHAR(32) NOT NULL, 
	depth INTEGER NOT NULL, 
	status INTEGER, 
	error_kind VARCHAR(32), 
	error VARCHAR(1024), 
	attempts INTEGER NOT NULL, 
	visited_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
CREATE UNIQUE INDEX ux_visited_url_fingerprint ON visited_url (fingerprint);
INSERT INTO crawl_meta (name, value) VALUES ('schema_version', '1');
