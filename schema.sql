-- schema.sql: gridcrawl's tables and views for Microsoft SQL Server (T-SQL), to run by hand.
--
-- GENERATED from gridcrawl/models.py and gridcrawl/views.py by `python -m gridcrawl.schema_sql`;
-- tests/test_schema_sql.py parses it as T-SQL and checks it equals the models (tables, columns,
-- types, keys, indexes, views). It is the schema `gridcrawl db init --db mssql+pyodbc://...`
-- creates (see docs/databases.md). Needs SQL Server 2016 SP1 or later (CREATE OR ALTER VIEW,
-- DATEDIFF_BIG). Run it with sqlcmd (GO separates batches):
--
--     sqlcmd -S host -d gridcrawl -U user -i schema.sql
--
-- Two databases, or both in one: the manager's records (manager_meta, executor, application,
-- thread, attempt, users and groups, and the timing views) and a crawl's tables (the paper's
-- figure 10: crawl_meta, document, visited_url, to_visit_url, ...).
-- Times are UTC, DATETIME2(6). Ids of executors and applications are GUIDs as text.

-- ============================================================================================
-- The manager's database
-- ============================================================================================

-- Settings and the schema version (a later release migrates from it).
CREATE TABLE manager_meta (
    name                 VARCHAR(64)     NOT NULL,
    value                VARCHAR(1024)   NOT NULL,
    CONSTRAINT pk_manager_meta PRIMARY KEY (name)
);
GO

-- One row per application (a crawl). state: 0 awaiting manifest, 1 ready, 2 stopped, 3 paused (by an operator).
CREATE TABLE application (
    application_id       VARCHAR(36)     NOT NULL,            -- GUID
    state                SMALLINT        NOT NULL,
    time_created         DATETIME2(6)    NOT NULL,
    time_completed       DATETIME2(6)    NULL,
    usr_name             VARCHAR(64)     NOT NULL,
    application_name     VARCHAR(255)    NOT NULL,
    CONSTRAINT pk_application PRIMARY KEY (application_id)
);
GO

-- One row per executor, as its last heartbeat reported it (Alchemi's executor table).
CREATE TABLE executor (
    executor_id          VARCHAR(36)     NOT NULL,            -- GUID
    name                 VARCHAR(255)    NOT NULL,
    is_dedicated         BIT             NOT NULL,            -- work pushed to it (1) or pulled by it (0)
    is_connected         BIT             NOT NULL,
    accepting            BIT             NOT NULL,            -- 0: takes no new threads now
    ping_time            DATETIME2(6)    NULL,                -- last heartbeat
    time_registered      DATETIME2(6)    NULL,
    host                 VARCHAR(255)    NOT NULL,
    port                 INTEGER         NULL,
    usr_name             VARCHAR(64)     NOT NULL,
    threads              INTEGER         NOT NULL,            -- grid threads it runs at once
    cpu_max              FLOAT           NOT NULL,            -- MHz x cores
    cpu_usage            FLOAT           NOT NULL,            -- %
    cpu_avail            FLOAT           NOT NULL,            -- %
    cpu_totalusage       FLOAT           NOT NULL,            -- CPU-seconds, cumulative
    mem_max              BIGINT          NOT NULL,            -- bytes
    mem_usage            BIGINT          NOT NULL,            -- bytes
    num_cpus             INTEGER         NOT NULL,
    pages_per_second     FLOAT           NOT NULL,            -- as the executor reported it
    arch                 VARCHAR(64)     NOT NULL,
    os                   VARCHAR(64)     NOT NULL,
    quarantined_until    DATETIME2(6)    NULL,
    capabilities         NVARCHAR(MAX)   NULL,
    CONSTRAINT pk_executor PRIMARY KEY (executor_id)
);
GO

-- Groups of users (Alchemi's grp): Administrators, Executors, Users.
CREATE TABLE grp (
    grp_id               SMALLINT        NOT NULL,
    grp_name             VARCHAR(64)     NOT NULL,
    CONSTRAINT pk_grp PRIMARY KEY (grp_id),
    CONSTRAINT uq_grp_grp_name UNIQUE (grp_name)
);
GO

-- Table manager_lease (see gridcrawl/models.py).
CREATE TABLE manager_lease (
    name                 VARCHAR(64)     NOT NULL,
    holder               VARCHAR(255)    NOT NULL,
    epoch                BIGINT          NOT NULL,
    expires_at           DATETIME2(6)    NOT NULL,
    address              VARCHAR(255)    NULL,
    since                DATETIME2(6)    NULL,
    CONSTRAINT pk_manager_lease PRIMARY KEY (name)
);
GO

-- Permissions (Alchemi's prm): ExecuteThread, ManageOwnApp, ManageAllApps, ManageUsers.
CREATE TABLE prm (
    prm_id               SMALLINT        NOT NULL,
    prm_name             VARCHAR(64)     NOT NULL,
    CONSTRAINT pk_prm PRIMARY KEY (prm_id),
    CONSTRAINT uq_prm_prm_name UNIQUE (prm_name)
);
GO

-- The permissions of each group.
CREATE TABLE grp_prm (
    grp_id               SMALLINT        NOT NULL,
    prm_id               SMALLINT        NOT NULL,
    CONSTRAINT pk_grp_prm PRIMARY KEY (grp_id, prm_id),
    CONSTRAINT fk_grp_prm_grp_id FOREIGN KEY (grp_id) REFERENCES grp (grp_id),
    CONSTRAINT fk_grp_prm_prm_id FOREIGN KEY (prm_id) REFERENCES prm (prm_id)
);
GO

-- One row per grid thread (one URL of one application).
-- state: 0 ready, 1 scheduled, 2 started, 3 finished, 4 dead.
CREATE TABLE thread (
    internal_thread_id   BIGINT          NOT NULL,
    application_id       VARCHAR(36)     NOT NULL,
    thread_id            BIGINT          NOT NULL,            -- the id within its application
    executor_id          VARCHAR(36)     NULL,                -- NULL until scheduled
    state                SMALLINT        NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    host                 VARCHAR(255)    NOT NULL,
    depth                INTEGER         NOT NULL,
    priority             INTEGER         NOT NULL,
    failed               BIT             NOT NULL,
    attempts             INTEGER         NOT NULL,
    error_kind           VARCHAR(32)     NULL,
    needs                NVARCHAR(MAX)   NULL,
    time_submitted       DATETIME2(6)    NOT NULL,
    time_started         DATETIME2(6)    NULL,
    time_finished        DATETIME2(6)    NULL,
    CONSTRAINT pk_thread PRIMARY KEY (internal_thread_id),
    CONSTRAINT fk_thread_application_id FOREIGN KEY (application_id) REFERENCES application (application_id),
    CONSTRAINT fk_thread_executor_id FOREIGN KEY (executor_id) REFERENCES executor (executor_id)
);
GO
CREATE UNIQUE INDEX ux_thread_application_thread ON thread (application_id, thread_id);
CREATE INDEX ix_thread_executor ON thread (executor_id);
CREATE INDEX ix_thread_state ON thread (state);
GO

-- Users (Alchemi's usr), with a salted password hash (see gridcrawl.auth).
CREATE TABLE usr (
    usr_name             VARCHAR(64)     NOT NULL,
    password_hash        VARCHAR(255)    NOT NULL,
    salt                 VARCHAR(64)     NOT NULL,
    grp_id               SMALLINT        NOT NULL,
    created              DATETIME2(6)    NOT NULL,
    CONSTRAINT pk_usr PRIMARY KEY (usr_name),
    CONSTRAINT fk_usr_grp_id FOREIGN KEY (grp_id) REFERENCES grp (grp_id)
);
GO

-- One row per assignment of a grid thread to an executor (outcome: running, finished, ...).
CREATE TABLE attempt (
    attempt_id           BIGINT          NOT NULL,
    internal_thread_id   BIGINT          NOT NULL,
    executor_id          VARCHAR(36)     NOT NULL,
    time_assigned        DATETIME2(6)    NOT NULL,
    time_started         DATETIME2(6)    NULL,
    time_finished        DATETIME2(6)    NULL,
    outcome              VARCHAR(16)     NOT NULL,
    epoch                BIGINT          NULL,
    CONSTRAINT pk_attempt PRIMARY KEY (attempt_id),
    CONSTRAINT fk_attempt_executor_id FOREIGN KEY (executor_id) REFERENCES executor (executor_id),
    CONSTRAINT fk_attempt_internal_thread_id FOREIGN KEY (internal_thread_id) REFERENCES thread (internal_thread_id)
);
GO
CREATE INDEX ix_attempt_executor ON attempt (executor_id);
CREATE INDEX ix_attempt_thread ON attempt (internal_thread_id);
GO

-- The views: "which executor ran which URL, and how long did it take" in one SELECT.
-- A page is a thread that finished and did not fail. Seconds: DATEDIFF_BIG in microseconds.

CREATE OR ALTER VIEW thread_timing AS
SELECT t.application_id, a.application_name, t.thread_id, t.internal_thread_id,
    t.url, t.host, t.depth,
    t.executor_id, e.name AS executor_name, e.host AS executor_host,
    t.state, t.failed, t.attempts, t.error_kind,
    t.time_submitted, t.time_started, t.time_finished,
    (CAST(DATEDIFF_BIG(microsecond, t.time_submitted, t.time_started) AS FLOAT) / 1000000.0) AS queue_wait_seconds,
    (CAST(DATEDIFF_BIG(microsecond, t.time_started, t.time_finished) AS FLOAT) / 1000000.0) AS run_seconds
FROM thread AS t
JOIN application AS a ON a.application_id = t.application_id
LEFT JOIN executor AS e ON e.executor_id = t.executor_id;
GO

CREATE OR ALTER VIEW executor_summary AS
SELECT e.executor_id, e.name AS executor_name, e.host, e.is_connected,
    e.threads AS worker_threads, e.num_cpus, e.cpu_max, e.cpu_usage, e.cpu_avail, e.cpu_totalusage,
    e.mem_max, e.mem_usage, e.pages_per_second AS reported_pages_per_second,
    COALESCE(s.threads, 0) AS threads, COALESCE(s.pages, 0) AS pages, COALESCE(s.failed, 0) AS failed,
    s.mean_run_seconds, s.min_run_seconds, s.max_run_seconds, s.mean_queue_wait_seconds,
    s.first_started, s.last_finished,
    s.pages / NULLIF((CAST(DATEDIFF_BIG(microsecond, g.first_submitted, g.last_finished) AS FLOAT) / 1000000.0), 0) AS pages_per_second,
    e.accepting
FROM executor AS e
LEFT JOIN (
    SELECT tt.executor_id, COUNT(*) AS threads,
        COUNT(CASE WHEN tt.time_finished IS NOT NULL AND tt.failed = 0 THEN 1 END) AS pages,
        COUNT(CASE WHEN tt.failed = 0 THEN NULL ELSE 1 END) AS failed,
        AVG(CASE WHEN tt.time_finished IS NOT NULL AND tt.failed = 0 THEN tt.run_seconds END) AS mean_run_seconds,
        MIN(CASE WHEN tt.time_finished IS NOT NULL AND tt.failed = 0 THEN tt.run_seconds END) AS min_run_seconds,
        MAX(CASE WHEN tt.time_finished IS NOT NULL AND tt.failed = 0 THEN tt.run_seconds END) AS max_run_seconds,
        AVG(CASE WHEN tt.time_finished IS NOT NULL AND tt.failed = 0 THEN tt.queue_wait_seconds END) AS mean_queue_wait_seconds,
        MIN(tt.time_started) AS first_started, MAX(tt.time_finished) AS last_finished
    FROM thread_timing AS tt
    WHERE tt.executor_id IS NOT NULL
    GROUP BY tt.executor_id
) AS s ON s.executor_id = e.executor_id
CROSS JOIN (
    SELECT MIN(t.time_submitted) AS first_submitted, MAX(t.time_finished) AS last_finished FROM thread AS t
) AS g;
GO

CREATE OR ALTER VIEW application_summary AS
SELECT a.application_id, a.application_name, a.usr_name, a.state,
    a.time_created, a.time_completed,
    COALESCE(s.threads, 0) AS threads, COALESCE(s.pages, 0) AS pages, COALESCE(s.failed, 0) AS failed,
    COALESCE(s.executors, 0) AS executors, s.first_started, s.last_finished,
    (CAST(DATEDIFF_BIG(microsecond, s.first_submitted, s.last_finished) AS FLOAT) / 1000000.0) AS elapsed_seconds,
    COALESCE(s.pages, 0) / NULLIF((CAST(DATEDIFF_BIG(microsecond, s.first_submitted, s.last_finished) AS FLOAT) / 1000000.0), 0) AS pages_per_second
FROM application AS a
LEFT JOIN (
    SELECT t.application_id, COUNT(*) AS threads,
        COUNT(CASE WHEN t.time_finished IS NOT NULL AND t.failed = 0 THEN 1 END) AS pages,
        COUNT(CASE WHEN t.failed = 0 THEN NULL ELSE 1 END) AS failed,
        COUNT(DISTINCT t.executor_id) AS executors, MIN(t.time_submitted) AS first_submitted,
        MIN(t.time_started) AS first_started, MAX(t.time_finished) AS last_finished
    FROM thread AS t
    GROUP BY t.application_id
) AS s ON s.application_id = a.application_id;
GO

-- ============================================================================================
-- A crawl's database (the paper's figure 10), keyed by URL fingerprint (MD5 of the canonical URL)
-- ============================================================================================

-- The crawl's settings (application id, scope) and the schema version.
CREATE TABLE crawl_meta (
    name                 VARCHAR(64)     NOT NULL,
    value                VARCHAR(1024)   NOT NULL,
    CONSTRAINT pk_crawl_meta PRIMARY KEY (name)
);
GO

-- The user's keep/follow rules (gridcrawl.rules).
CREATE TABLE crawl_rule (
    rule_id              INTEGER         NOT NULL,
    base_url             VARCHAR(2083)   NOT NULL,
    rule_type            VARCHAR(16)     NOT NULL,
    from_type            VARCHAR(64)     NOT NULL,
    to_type              VARCHAR(64)     NULL,
    pattern              VARCHAR(1024)   NOT NULL,
    element_id           VARCHAR(255)    NOT NULL,
    element_class        VARCHAR(255)    NOT NULL,
    element_tag          VARCHAR(64)     NOT NULL,
    CONSTRAINT pk_crawl_rule PRIMARY KEY (rule_id)
);
GO

-- The pages fetched: one row per canonical URL.
CREATE TABLE document (
    doc_id               BIGINT          IDENTITY(1, 1) NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    final_url            VARCHAR(2083)   NOT NULL,            -- after redirects
    status               INTEGER         NULL,                -- HTTP status
    content_type         VARCHAR(255)    NULL,
    size                 BIGINT          NOT NULL,            -- bytes, after decompression
    title                NVARCHAR(MAX)   NULL,
    encoding             VARCHAR(64)     NULL,
    content              NVARCHAR(MAX)   NULL,                -- decoded text, or NULL
    body                 VARBINARY(MAX)  NULL,                -- raw bytes of a kept non-text page, or NULL
    depth                INTEGER         NOT NULL,
    fetched_at           DATETIME2(6)    NOT NULL,
    executor             VARCHAR(36)     NULL,                -- executor_id of the executor that fetched it
    fetch_seconds        FLOAT           NOT NULL,
    parse_seconds        FLOAT           NOT NULL,
    extract_seconds      FLOAT           NOT NULL,
    page_type            VARCHAR(64)     NULL,
    relevance            FLOAT           NULL,
    headers              NVARCHAR(MAX)   NULL,                -- final response's headers, JSON object
    structured_data      NVARCHAR(MAX)   NULL,                -- semantic crawl: JSON-LD, microdata, Open Graph, JSON
    content_digest       VARCHAR(64)     NULL,
    etag                 VARCHAR(255)    NULL,
    last_modified        VARCHAR(64)     NULL,
    visited_at           DATETIME2(6)    NULL,
    visit_status         INTEGER         NULL,
    modified_at          DATETIME2(6)    NULL,
    gone_at              DATETIME2(6)    NULL,
    fetch_interval       FLOAT           NULL,
    next_fetch_at        DATETIME2(6)    NULL,
    simhash              VARCHAR(16)     NULL,
    canonical_url        VARCHAR(2083)   NULL,
    duplicate_of         VARCHAR(2083)   NULL,
    lastmod              DATETIME2(6)    NULL,
    render_seconds       FLOAT           NULL,
    refused_requests     NVARCHAR(MAX)   NULL,
    CONSTRAINT pk_document PRIMARY KEY (doc_id)
);
GO
CREATE UNIQUE INDEX ux_document_fingerprint ON document (fingerprint);
CREATE INDEX ix_document_content_digest ON document (content_digest);
CREATE INDEX ix_document_next_fetch_at ON document (next_fetch_at);
GO

-- Table document_version (see gridcrawl/models.py).
CREATE TABLE document_version (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    final_url            VARCHAR(2083)   NULL,
    status               INTEGER         NULL,
    content_type         VARCHAR(255)    NULL,
    size                 BIGINT          NOT NULL,
    content_digest       VARCHAR(64)     NULL,
    etag                 VARCHAR(255)    NULL,
    last_modified        VARCHAR(64)     NULL,
    fetched_at           DATETIME2(6)    NOT NULL,
    replaced_at          DATETIME2(6)    NOT NULL,
    encoding             VARCHAR(64)     NULL,
    headers              NVARCHAR(MAX)   NULL,
    content              NVARCHAR(MAX)   NULL,
    body                 VARBINARY(MAX)  NULL,
    CONSTRAINT pk_document_version PRIMARY KEY (id)
);
GO
CREATE INDEX ix_document_version_fingerprint ON document_version (fingerprint);
GO

-- Table item (see gridcrawl/models.py).
CREATE TABLE item (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    type                 VARCHAR(64)     NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    position             INTEGER         NOT NULL,
    fields               NVARCHAR(MAX)   NOT NULL,
    extracted_at         DATETIME2(6)    NOT NULL,
    CONSTRAINT pk_item PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_item_fingerprint ON item (fingerprint, type, position);
CREATE INDEX ix_item_type ON item (type, id);
GO

-- Table item_issue (see gridcrawl/models.py).
CREATE TABLE item_issue (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    type                 VARCHAR(64)     NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    position             INTEGER         NOT NULL,
    field                VARCHAR(200)    NOT NULL,
    kind                 VARCHAR(16)     NOT NULL,
    message              VARCHAR(1024)   NULL,
    noted_at             DATETIME2(6)    NOT NULL,
    CONSTRAINT pk_item_issue PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_item_issue_fingerprint ON item_issue (fingerprint, type, position, field);
GO

-- Table item_spec (see gridcrawl/models.py).
CREATE TABLE item_spec (
    id                   INTEGER         NOT NULL,
    source               VARCHAR(1024)   NOT NULL,
    text                 NVARCHAR(MAX)   NOT NULL,
    stored_at            DATETIME2(6)    NOT NULL,
    CONSTRAINT pk_item_spec PRIMARY KEY (id)
);
GO

-- The links the keep rules kept.
CREATE TABLE kept_link (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    source_url           VARCHAR(2083)   NOT NULL,
    source_page_type     VARCHAR(64)     NULL,
    [rule]               INTEGER         NOT NULL,
    kept_at              DATETIME2(6)    NOT NULL,
    CONSTRAINT pk_kept_link PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_kept_link_fingerprint ON kept_link (fingerprint, [rule]);
GO

-- Table recrawl (see gridcrawl/models.py).
CREATE TABLE recrawl (
    recrawl_id           BIGINT          IDENTITY(1, 1) NOT NULL,
    mode                 VARCHAR(16)     NOT NULL,
    started_at           DATETIME2(6)    NOT NULL,
    finished_at          DATETIME2(6)    NULL,
    due                  INTEGER         NOT NULL,
    fetched              INTEGER         NOT NULL,
    not_modified         INTEGER         NOT NULL,
    unchanged            INTEGER         NOT NULL,
    changed              INTEGER         NOT NULL,
    gone                 INTEGER         NOT NULL,
    revived              INTEGER         NOT NULL,
    errors               INTEGER         NOT NULL,
    new                  INTEGER         NOT NULL,
    disallowed           INTEGER         NOT NULL,
    CONSTRAINT pk_recrawl PRIMARY KEY (recrawl_id)
);
GO

-- Table sitemap (see gridcrawl/models.py).
CREATE TABLE sitemap (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    kind                 VARCHAR(16)     NOT NULL,
    depth                INTEGER         NOT NULL,
    status               INTEGER         NULL,
    content_digest       VARCHAR(64)     NULL,
    etag                 VARCHAR(255)    NULL,
    last_modified        VARCHAR(64)     NULL,
    visited_at           DATETIME2(6)    NOT NULL,
    fetch_interval       FLOAT           NULL,
    next_fetch_at        DATETIME2(6)    NULL,
    CONSTRAINT pk_sitemap PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_sitemap_fingerprint ON sitemap (fingerprint);
GO

-- The frontier. A row's id is also its grid thread's thread_id within the application.
-- Clients claim rows with SELECT TOP (n) ... FROM to_visit_url WITH (UPDLOCK, READPAST, ROWLOCK).
CREATE TABLE to_visit_url (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    depth                INTEGER         NOT NULL,
    priority             INTEGER         NOT NULL,            -- higher runs first
    discovered_from      VARCHAR(2083)   NULL,
    in_flight            BIT             NOT NULL,            -- claimed by a client, submitted to the grid
    page_type            VARCHAR(64)     NULL,
    relevance            FLOAT           NULL,
    etag                 VARCHAR(255)    NULL,
    last_modified        VARCHAR(64)     NULL,
    kind                 VARCHAR(16)     NULL,
    lastmod              DATETIME2(6)    NULL,
    CONSTRAINT pk_to_visit_url PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_to_visit_url_fingerprint ON to_visit_url (fingerprint);
CREATE INDEX ix_to_visit_url_depth ON to_visit_url (in_flight, depth, id);
CREATE INDEX ix_to_visit_url_priority ON to_visit_url (in_flight, priority DESC, id);
GO

-- Semantic crawl: the triples of RDF documents and HTML structured data, once per page (gridcrawl.semantic).
CREATE TABLE triple (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,            -- the page's (document.fingerprint)
    subject              NVARCHAR(2083)  NOT NULL,            -- IRI, or _:bN (a blank node of the page)
    predicate            NVARCHAR(2083)  NOT NULL,
    object               NVARCHAR(MAX)   NOT NULL,
    object_kind          VARCHAR(8)      NOT NULL,            -- uri, literal or bnode
    datatype             NVARCHAR(2083)  NULL,
    language             VARCHAR(64)     NULL,
    triple_key           VARCHAR(64)     NOT NULL,            -- SHA-256 of the six fields, hex
    CONSTRAINT pk_triple PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_triple_page ON triple (fingerprint, triple_key);
GO

-- Every URL whose grid thread finished, fetched or not (error_kind says why not).
CREATE TABLE visited_url (
    id                   BIGINT          IDENTITY(1, 1) NOT NULL,
    url                  VARCHAR(2083)   NOT NULL,
    fingerprint          VARCHAR(32)     NOT NULL,
    depth                INTEGER         NOT NULL,
    status               INTEGER         NULL,
    error_kind           VARCHAR(32)     NULL,
    error                VARCHAR(1024)   NULL,
    attempts             INTEGER         NOT NULL,
    visited_at           DATETIME2(6)    NOT NULL,
    page_type            VARCHAR(64)     NULL,
    CONSTRAINT pk_visited_url PRIMARY KEY (id)
);
GO
CREATE UNIQUE INDEX ux_visited_url_fingerprint ON visited_url (fingerprint);
GO

-- ============================================================================================
-- The schema revisions: Alembic's version tables (gridcrawl.migrations)
-- ============================================================================================

-- Table gridcrawl_manager_version (see gridcrawl/models.py).
CREATE TABLE gridcrawl_manager_version (
    version_num          VARCHAR(32)     NOT NULL,
    CONSTRAINT gridcrawl_manager_version_pkc PRIMARY KEY (version_num)
);
GO

INSERT INTO gridcrawl_manager_version (version_num) VALUES ('0006');
INSERT INTO manager_meta (name, value) VALUES ('schema_version', '6');
-- Table gridcrawl_crawl_version (see gridcrawl/models.py).
CREATE TABLE gridcrawl_crawl_version (
    version_num          VARCHAR(32)     NOT NULL,
    CONSTRAINT gridcrawl_crawl_version_pkc PRIMARY KEY (version_num)
);
GO

INSERT INTO gridcrawl_crawl_version (version_num) VALUES ('0011');
INSERT INTO crawl_meta (name, value) VALUES ('schema_version', '11');
GO
