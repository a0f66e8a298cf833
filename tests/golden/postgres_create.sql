-- Queue table: one row per attempt of a task.
CREATE TABLE public.fila_teste (
    id bigserial PRIMARY KEY,
    id_inicial bigint,
    data_hora_inicial timestamp with time zone DEFAULT clock_timestamp(),
    data_hora timestamp with time zone DEFAULT clock_timestamp(),
    origem varchar(150),
    destino varchar(150),
    processo varchar(250),
    chave_externa varchar(100),
    proxima_tentativa timestamp with time zone,
    tentativa integer DEFAULT 1,
    status varchar(100) DEFAULT 'pendente',
    reenfileirado boolean DEFAULT false,
    estouro_tentativas boolean DEFAULT false,
    mensagem varchar(500),
    id_anterior bigint,
    data_hora_anterior timestamp with time zone,
    status_anterior varchar(100),
    mensagem_anterior varchar(500),
    payload text,
    tenant bigint,
    grupo_empresarial varchar(40),
    payload_hash bytea,
    pub_sub boolean DEFAULT false NOT NULL,
    publication_id bigint,
    subscriber_id varchar(100),
    dead boolean DEFAULT false NOT NULL,
    live_id bigint,
    prioridade integer DEFAULT 50,
    -- Life cycle (docs/lifecycle.md): nullable or defaulted, so that statements
    -- that never name them (1.2.2's workers) keep working.
    cancel_requested boolean DEFAULT false NOT NULL,
    progress_done bigint,
    progress_total bigint,
    progress_message varchar(500),
    -- Flow control (docs/flow-control.md): at most one unfinished task per dedupe_key.
    dedupe_key varchar(200),
    -- Tasks with equal lock_key never run at the same time (docs/flow-control.md).
    lock_key varchar(200),
    -- The attempt's timeline (docs/reference/queue-table.md): when a worker claimed
    -- it, which worker (its workers table name), and when it ended, by the
    -- database's clock. NULL while it waits, and on rows 1.2.2's workers wrote.
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    worker varchar(200),
    -- The enqueuing code's W3C trace context (docs/integrations/opentelemetry.md);
    -- NULL without OpenTelemetry. Carried by retries and dead letters.
    trace_context varchar(512),
    -- The task's own overrides, given at enqueue (docs/fleet-control.md): NULL means
    -- the @Task option, else the queue's default. Carried by retries.
    max_retry integer,
    timeout_s double precision,
    next_try_priority integer,
    -- The task's fair key (docs/fleet-control.md): claims rotate across fair keys
    -- among ready tasks of one prioridade. Carried by retries.
    fair_key varchar(200)
);

-- Autovacuum of the queue table by fixed counts of rows instead of a fraction
-- of the table. Autovacuum's defaults wait for a fifth of the table's rows to
-- be dead (a tenth changed, for ANALYZE), and the table keeps up to
-- QUEUE_PURGE_MAX_AGE days of history: on ten million rows, two million dead
-- versions, whose claim-index entries every claim walks past.
-- - Vacuum at 1000 dead rows (about 500 tasks: claim and settle each leave a
--   dead version, never HOT, so with an entry in every index). A vacuum's
--   pass over the table reads only the pages changed since the previous one
--   (the visibility map skips the rest); its pass over each index, whole,
--   PostgreSQL 14+ skips while few pages hold dead rows. (Hatchet's hot
--   table, kept small, has thresholds of 25 rows; this one holds history.)
-- - Analyze at 10000 changed rows (QUEUE_VACUUM_DEAD_ROWS's default, the
--   workers' vacuum service's own threshold). An ANALYZE reads a fixed sample
--   (up to 300 x default_statistics_target rows) however few rows changed, so
--   it runs less often than a vacuum.
-- - A cost limit of 1000, five times the default budget (vacuum_cost_limit,
--   200), so that a vacuum of this hot table ends before the next thousand
--   dead rows are there.
-- - The insert threshold keeps its default: every enqueued task is then
--   claimed and settled, so the dead rows trigger a vacuum first, and each
--   vacuum starts the count of inserts again.
-- A setting the table already has is left as it is: an operator's own choice
-- survives db_gen --upgrade.
DO $$
DECLARE
    setting text;
BEGIN
    FOREACH setting IN ARRAY ARRAY[
        'autovacuum_vacuum_scale_factor = 0',
        'autovacuum_vacuum_threshold = 1000',
        'autovacuum_analyze_scale_factor = 0',
        'autovacuum_analyze_threshold = 10000',
        'autovacuum_vacuum_cost_limit = 1000'
    ] LOOP
        IF NOT EXISTS (
            SELECT 1
            FROM pg_class AS c, unnest(c.reloptions) AS o
            WHERE c.oid = 'public.fila_teste'::regclass
              AND split_part(o, '=', 1) = split_part(setting, ' ', 1)
        ) THEN
            EXECUTE format('ALTER TABLE %s SET (%s)', 'public.fila_teste'::regclass, setting);
        END IF;
    END LOOP;
END
$$;

-- The claim: ready rows in claim order (higher priority first, then older).
-- Partial, so its size follows the ready backlog, not the table's history.
CREATE INDEX IF NOT EXISTS idx_fila_teste_claim ON public.fila_teste (prioridade DESC, data_hora, id) WHERE status = 'pendente';
-- Rows waiting for their time: renotify scans and the dispatcher's next wake-up.
CREATE INDEX IF NOT EXISTS idx_fila_teste_due ON public.fila_teste (data_hora) WHERE status IN ('pendente', 'agendada');
-- The earliest retry waiting for its time (the dispatcher's next wake-up, promotions).
CREATE INDEX IF NOT EXISTS idx_fila_teste_scheduled ON public.fila_teste (data_hora) WHERE status = 'agendada';
-- The retry service looks only at rows being processed.
CREATE INDEX IF NOT EXISTS idx_fila_teste_running ON public.fila_teste (id) WHERE status = 'processando';
-- Purge: oldest settled rows first. Partial (the purge's own condition), so
-- enqueuing and claiming a task add no entry here; only settling does.
CREATE INDEX IF NOT EXISTS idx_fila_teste_data_hora ON public.fila_teste (data_hora) WHERE status NOT IN ('pendente', 'agendada', 'processando');
-- Purge keeps a task's first attempt while a later attempt still needs its
-- payload. Only later attempts have id_inicial, so first attempts (nearly
-- every row) never enter this index.
CREATE INDEX IF NOT EXISTS idx_fila_teste_chain ON public.fila_teste (id_inicial) WHERE id_inicial IS NOT NULL AND status IN ('pendente', 'agendada', 'processando');
-- A task's latest attempt (QueueClient.get_task, cancel_task): later attempts only.
CREATE INDEX IF NOT EXISTS idx_fila_teste_attempts ON public.fila_teste (id_inicial) WHERE id_inicial IS NOT NULL;
-- QueueClient.list_equivalent_task (and 1.2.2's): the rows of one chave_externa,
-- whose payload_hash and status are checked on the row. Only the key: every claim
-- and every settle adds an entry to each full index (the status change rules out
-- HOT updates), and with payload_hash (64 bytes of hex) and status this index was
-- larger than the table itself; on a backlog of 50,000 that made each claimed
-- task's index upkeep about a tenth dearer than on 5,000 (docs/benchmarks.md).
CREATE INDEX IF NOT EXISTS idx_fila_teste_equivalent ON public.fila_teste (chave_externa);
-- dedupe_key: at most one unfinished task per key (QueueClient's dedupe_key=); a
-- finished task (sucesso, cancelada, an exhausted failure) leaves the index.
CREATE UNIQUE INDEX IF NOT EXISTS idx_fila_teste_dedupe ON public.fila_teste (dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pendente', 'agendada', 'processando');
-- lock_key: the claim's two probes of a keyed candidate: the first ready task
-- of its key in claim order, and whether a task of its key is running. The
-- second is unique: two claims whose snapshots both saw the key free cannot
-- both commit a running task of it (the later one skips the row).
CREATE INDEX IF NOT EXISTS idx_fila_teste_lock_key ON public.fila_teste (lock_key, prioridade DESC, data_hora, id) WHERE lock_key IS NOT NULL AND status = 'pendente';
CREATE UNIQUE INDEX IF NOT EXISTS idx_fila_teste_lock_key_running ON public.fila_teste (lock_key) WHERE lock_key IS NOT NULL AND status = 'processando';
-- Tasks waiting for their parents (docs/how-to/dependencies.md): what nsjq status counts
-- of them (db/tally.py) without reading the history.
CREATE INDEX IF NOT EXISTS idx_fila_teste_aguardando ON public.fila_teste (id) WHERE status = 'aguardando';
-- Per-processo limits: the limited claim's look at the ready and running
-- tasks of one processo (docs/flow-control.md).
CREATE INDEX IF NOT EXISTS idx_fila_teste_processo ON public.fila_teste (processo, status) WHERE status IN ('pendente', 'processando');
-- fair_key: the enqueue's look-up of a key's last ready task of one prioridade, whose
-- data_hora the key's next task follows (fleet/fair.py). Unkeyed tasks never enter it.
CREATE INDEX IF NOT EXISTS idx_fila_teste_fair_key ON public.fila_teste (fair_key, prioridade, data_hora) WHERE fair_key IS NOT NULL AND status = 'pendente';

-- Tells the workers listening on channel 'fila_teste' about new tasks: payload
-- '' when one is ready now, 'scheduled' when one is due later (they then re-plan
-- their next wake-up). Delivered at commit; identical notifications are merged.
-- Once per INSERT statement, over the rows it added: a bulk insert pays for
-- one call instead of one per row (docs/benchmarks.md).
CREATE OR REPLACE FUNCTION public.notify_fila_teste_insert()
RETURNS trigger AS $$
DECLARE
    now timestamptz := clock_timestamp();
BEGIN
    IF EXISTS (
        SELECT 1 FROM new_tasks WHERE status = 'pendente' AND data_hora <= now
    ) THEN
        PERFORM pg_notify('fila_teste', '');
    END IF;
    IF EXISTS (
        SELECT 1 FROM new_tasks
        WHERE status = 'agendada'
           OR (status = 'pendente' AND (data_hora IS NULL OR data_hora > now))
    ) THEN
        PERFORM pg_notify('fila_teste', 'scheduled');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS trigger_insert_fila_teste ON public.fila_teste;
CREATE TRIGGER trigger_insert_fila_teste
AFTER INSERT ON public.fila_teste
REFERENCING NEW TABLE AS new_tasks
FOR EACH STATEMENT
EXECUTE FUNCTION public.notify_fila_teste_insert();

-- wait_for_task's wake-up (nsj_queue_lib/workflow/waiting.py): the end of a task
-- someone waits for is told on channel 'fila_teste_end', its payload the task's
-- first attempt's id. A waiter says it waits by holding a shared advisory lock,
-- (-562726803, the id's low 31 bits), while it waits. The trigger's WHEN
-- clause asks, for each row whose status becomes an end: it takes that lock
-- and lets it go at once when no one holds it (the usual case: no event is
-- queued, no function called, no NOTIFY sent), and fires when it cannot, i.e.
-- when someone waits. A NOTIFY serializes the commits of the transactions that
-- send one: the workers' settles must not pay for it, nor for a function call,
-- on every task. The CASEs fix the order of the calls. A failure with a retry
-- ahead wakes the waiter for nothing, and it waits on.
CREATE OR REPLACE FUNCTION public.notify_fila_teste_end()
RETURNS trigger
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    PERFORM pg_notify('fila_teste_end', coalesce(NEW.id_inicial, NEW.id)::text);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS trigger_end_fila_teste ON public.fila_teste;
CREATE TRIGGER trigger_end_fila_teste
AFTER UPDATE OF status ON public.fila_teste
FOR EACH ROW
WHEN (CASE WHEN NEW.status IN ('sucesso', 'cancelada', 'falha', 'falha_processando') THEN
    CASE WHEN pg_try_advisory_lock(-562726803, (coalesce(NEW.id_inicial, NEW.id) % 2147483648)::integer)
    THEN NOT pg_advisory_unlock(-562726803, (coalesce(NEW.id_inicial, NEW.id) % 2147483648)::integer)
    ELSE true END
ELSE false END)
EXECUTE FUNCTION public.notify_fila_teste_end();

-- Dependencies between tasks (docs/how-to/dependencies.md, nsj_queue_lib/workflow/).
-- One row per (parent, child): parent_id is the parent's first attempt's id
-- (its id_inicial), child_id the child's. The claim and settle functions look
-- a settled task up here by parent_id; parents() reads a child's by child_id.
-- settled: the parent's failure has been counted in the child's pending_parents
-- (a failure's cascade flips it, so a retry by hand that succeeds is not counted
-- again), or the parent had ended when the child was inserted. A success is
-- counted without writing the edge (the release function): it is final.
-- slot: which of the child's counts (<queue>_waiting) the edge is counted in;
-- -1: the edge of a child's only unfinished parent (a fan-out's children), which
-- the release function reads and nothing else: the parent's success releases the
-- child by this edge alone, and the edge and its count stay as inserted (a
-- failure's cascade, workflow/dependencies.py, finds the child no longer
-- 'aguardando' after that and leaves it).
CREATE TABLE public.fila_teste_parents (
    parent_id bigint NOT NULL,
    child_id bigint NOT NULL,
    settled boolean NOT NULL DEFAULT false,
    slot smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_parents_child ON public.fila_teste_parents (child_id);

-- A child in 'aguardando': how many of its parents have not finished yet, and
-- what a parent that ends dead-lettered or 'cancelada' does to it ('cancel':
-- the child is cancelled; 'run': it counts as finished). The count is split in
-- slots: a fan-in's parents, settled at once by several executors, lock their
-- own slots' rows until their commits. With one row, every settle waited for
-- the previous one's commit (the 10,000 parents of a fan-in drained at about
-- half the rate of independent tasks, a third inside a 1 -> 10,000 -> 1
-- workflow). A parent's edge counts in slot (parent_id / 8) % 32 (add_edge):
-- tasks are claimed in id order, a commit group's (up to QUEUE_BATCH_SIZE, 20)
-- consecutive ids, so a group takes a few neighbouring slots, which other
-- groups share only at their ends; slot parent_id % 32 put every group in
-- most slots. The child is released when its last slot reaches 0.
CREATE TABLE public.fila_teste_waiting (
    child_id bigint NOT NULL,
    slot smallint NOT NULL DEFAULT 0,
    pending_parents integer NOT NULL,
    on_parent_failure varchar(10) NOT NULL DEFAULT 'cancel',
    PRIMARY KEY (child_id, slot)
);

-- The children of settled parents (their first attempts' ids), released in the
-- settling transaction: the parents' unsettled edges flip, each child's slots go
-- down by their edges that flipped, and the children whose counts are all 0
-- become 'pendente' (the workers are told at commit). One statement per step,
-- whatever the number of children: no query per child.
-- Every statement walks indexes from the settled parents' edges (nested loops):
-- the first lock read the whole <queue>_waiting table at every settle, a seq
-- scan in a hash join or its primary key in a merge join (the planner guesses
-- 500 edges for any array of parents), 10,000 rows per settle of a commit group
-- of the fan-in's parents (6 ms of a backend's CPU each, 3 s in all).
-- Its planner settings are its own: called from the claim function, whose sort and
-- bitmap scans are off, its plans were made under those, and kept by the session
-- for every later call (a plan is not made again when the settings change): the
-- edges' count, kept from sorting, read every edge in child order, all of the
-- queue's edges at every settle (2.4 ms a settle of a 1 -> 10,000 -> 1 workflow's
-- children); every call's statements are planned once, generically, the same way.
CREATE OR REPLACE FUNCTION public.release_fila_teste(parent_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_sort = on
SET enable_bitmapscan = on
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    zeroed bigint[] := '{}';
    released integer;
    sole_released integer;
    edges record;
    need integer;
    emptied boolean;
    free_slot smallint;
    free_count integer;
BEGIN
    -- A released child is due from now (or later, when it was scheduled so): a claim
    -- goes on from its last look-up's position while that is recent (claim_function.sql),
    -- and a child due at its insert's time, before that position, waited for the
    -- position's end (a 10,000 -> 1 fan-in started 2.2 s after its last parent).
    -- A child whose one unfinished parent this is (slot -1, add_edge): its row
    -- alone. Counting down as below cost a 1 -> 10,000 fan-out's release three
    -- times the UPDATE of its 10,000 rows (an edge and a count written per child
    -- besides). Only this parent's settle locks these rows, in its one statement.
    -- The edges by the parents' key first, then the rows by their primary key (status
    -- || '' is no condition the 'aguardando' index's predicate implies). As a join,
    -- planned generically, the statement read the rows first, walking that index
    -- (whose entries outlive their rows' release) or the primary key whole: a
    -- fan-out's 10,000 children were read again at each of their own settles.
    UPDATE public.fila_teste AS t
    SET status = 'pendente', data_hora = greatest(t.data_hora, clock_timestamp())
    WHERE t.id = ANY(ARRAY(
            SELECT p.child_id FROM public.fila_teste_parents AS p
            WHERE p.parent_id = ANY(parent_ids) AND p.slot = -1 AND NOT p.settled
        ))
      AND t.status || '' = 'aguardando';
    GET DIAGNOSTICS sole_released = ROW_COUNT;
    -- Each child's count goes down by its edges among these parents, taken from
    -- whichever of its slots are free: a slot is a share of the count, not of the
    -- parents, so a commit group never waits for another's slot while a free one
    -- holds enough (each waited for the other's commit on a shared slot: a
    -- 10,000 -> 1 fan-in's parents drained at half the rate of independent tasks
    -- with two workers). The edges are counted without being written: a task ends
    -- 'sucesso' once (its attempts' fence; retry_task takes only exhausted
    -- failures); an edge settled before (a failure's cascade counted it, or the
    -- parent had ended when the child was inserted) is not counted again.
    FOR edges IN
        SELECT p.child_id, count(*)::integer AS n
        FROM public.fila_teste_parents AS p
        WHERE p.parent_id = ANY(parent_ids) AND NOT p.settled AND p.slot >= 0
        GROUP BY p.child_id
        ORDER BY p.child_id
    LOOP
        -- One free slot that holds them all (nearly always, until the count's last
        -- parents): taken alone, with no subtransaction. A settlement of many children
        -- of several parents each would otherwise open one per child, and past 64 a
        -- transaction's subtransactions slow every other session's snapshots.
        SELECT w.slot, w.pending_parents INTO free_slot, free_count
        FROM public.fila_teste_waiting AS w
        WHERE w.child_id = edges.child_id AND w.pending_parents >= edges.n
        ORDER BY w.slot
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE public.fila_teste_waiting AS w
            SET pending_parents = w.pending_parents - edges.n
            WHERE w.child_id = edges.child_id AND w.slot = free_slot;
            IF free_count = edges.n THEN
                zeroed := array_append(zeroed, edges.child_id);
            END IF;
            CONTINUE;
        END IF;
        need := edges.n;
        emptied := false;
        BEGIN
            -- Free slots only, one at a time, in slot order: this transaction holds a
            -- slot it took some of and every slot it emptied, nothing it skipped.
            LOOP
                SELECT w.slot, w.pending_parents INTO free_slot, free_count
                FROM public.fila_teste_waiting AS w
                WHERE w.child_id = edges.child_id AND w.pending_parents > 0
                ORDER BY w.slot
                LIMIT 1
                FOR UPDATE SKIP LOCKED;
                EXIT WHEN NOT FOUND;
                UPDATE public.fila_teste_waiting AS w
                SET pending_parents = w.pending_parents - least(free_count, need)
                WHERE w.child_id = edges.child_id AND w.slot = free_slot;
                emptied := emptied OR free_count <= need;
                need := need - least(free_count, need);
                EXIT WHEN need = 0;
            END LOOP;
            IF need > 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'NQ002';
            END IF;
        EXCEPTION WHEN SQLSTATE 'NQ002' THEN
            -- Not enough free (the last parents, settled at once): the block's takes
            -- and locks are undone, and every slot is locked in slot order, waiting
            -- for the transactions that hold them, as every such wait is ordered (a
            -- transaction that skipped never waits for a slot; the gate below waits
            -- for none).
            PERFORM 1 FROM public.fila_teste_waiting AS w
            WHERE w.child_id = edges.child_id
            ORDER BY w.slot
            FOR UPDATE;
            WITH taken AS (
                UPDATE public.fila_teste_waiting AS w
                SET pending_parents = w.pending_parents - least(w.pending_parents, edges.n - r.before)
                FROM (
                    SELECT o.slot, coalesce(sum(o.pending_parents) OVER (
                        ORDER BY o.slot ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
                    ), 0) AS before
                    FROM public.fila_teste_waiting AS o
                    WHERE o.child_id = edges.child_id AND o.pending_parents > 0
                ) AS r
                WHERE w.child_id = edges.child_id AND w.slot = r.slot AND r.before < edges.n
                RETURNING w.pending_parents
            )
            SELECT coalesce(bool_or(taken.pending_parents = 0), false) INTO emptied FROM taken;
        END;
        IF emptied THEN
            zeroed := array_append(zeroed, edges.child_id);
        END IF;
    END LOOP;
    IF cardinality(zeroed) = 0 THEN
        IF sole_released > 0 THEN
            PERFORM pg_notify('fila_teste', '');
        END IF;
        RETURN sole_released;
    END IF;
    -- A child whose other slots are counted down by other transactions: its row is
    -- locked (in id order) before its slots are read, so that of two transactions
    -- each emptying one of its last two slots, the second reads after the first's
    -- commit and releases it (each would read the other's slot unfinished
    -- otherwise). Every transaction that empties a slot comes here, and an empty
    -- slot stays empty, so the last of them to take the lock sees every slot
    -- empty. A child of one slot needs no such lock: its slot's lock is held.
    PERFORM 1
    FROM public.fila_teste AS t
    WHERE t.id = ANY(zeroed)
      AND (SELECT count(*) FROM public.fila_teste_waiting AS o WHERE o.child_id = t.id) > 1
    ORDER BY t.id
    FOR UPDATE OF t;
    UPDATE public.fila_teste AS t
    SET status = 'pendente', data_hora = greatest(t.data_hora, clock_timestamp())
    WHERE t.id = ANY(zeroed) AND t.status || '' = 'aguardando'
      AND NOT EXISTS (
          SELECT 1 FROM public.fila_teste_waiting AS w WHERE w.child_id = t.id AND w.pending_parents > 0
      );
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released + sole_released > 0 THEN
        PERFORM pg_notify('fila_teste', '');
    END IF;
    RETURN released + sole_released;
END;
$$;

-- Durable steps and waits (docs/how-to/durable-steps.md, nsj_queue_lib/workflow/steps.py):
-- one checkpoint per (task, name), task_id being the task's first attempt's id
-- (its id_inicial), so every attempt of the task finds it. result is the step's
-- JSON result, committed with the step's writes; attempt_id the attempt that
-- wrote it. A durable wait's checkpoint names the event it waits for in
-- waiting_for until the event arrives (send_event looks there).
CREATE TABLE public.fila_teste_steps (
    task_id bigint NOT NULL,
    name varchar(200) NOT NULL,
    result text NOT NULL,
    attempt_id bigint NOT NULL,
    waiting_for varchar(200),
    created_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (task_id, name)
);

-- The events sent to tasks (QueueClient.send_event), kept whether or not the
-- task waits for them yet; task_id is the task's first attempt's id. A task's
-- n-th wait_event of a name gets its n-th event of that name (by id).
CREATE TABLE public.fila_teste_events (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    name varchar(200) NOT NULL,
    payload text,
    created_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_events_task ON public.fila_teste_events (task_id, name, id);

-- Workflows (nsj_queue_lib/workflow/builder.py, docs/how-to/workflows.md): one
-- row per Workflow enqueued. Its id is its first task's id, so it needs no
-- sequence of its own and a workflow's tasks are found from any of them.
CREATE TABLE public.fila_teste_workflows (
    id bigint NOT NULL PRIMARY KEY,
    name varchar(200) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A workflow's tasks (their first attempts' ids) in the order they were added;
-- the edges between them are the dependencies' (the parents table). task_id is
-- indexed for the console's link from a task to its workflow.
CREATE TABLE public.fila_teste_workflow_tasks (
    workflow_id bigint NOT NULL,
    seq integer NOT NULL,
    task_id bigint NOT NULL,
    PRIMARY KEY (workflow_id, seq)
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_workflow_task ON public.fila_teste_workflow_tasks (task_id);

-- Process instances (nsj_queue_lib/process/, docs/how-to/processes.md). One row
-- per process: the handler's state (a JSON document), status and detail, saved
-- with the commit of the task that set them. corrupted_by: the task whose dead
-- letter corrupted the process (only repair tasks run until one succeeds);
-- timer_task_id: its pending timer (set_timer replaces it); remove_at: when the
-- purge service deletes the process and its history (remove_after).
CREATE TABLE public.fila_teste_processes (
    process_id varchar(190) NOT NULL PRIMARY KEY,
    processo varchar(250) NOT NULL,
    status varchar(100),
    detail text,
    state text NOT NULL,
    corrupted_by bigint,
    timer_task_id bigint,
    remove_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_process_removal ON public.fila_teste_processes (remove_at)
    WHERE remove_at IS NOT NULL;

-- Each task of a process (its first attempt's id): what it is ('start', 'call',
-- 'repair', 'timer') and, once it succeeded, its handler's response (JSON text),
-- which a synchronous caller reads.
CREATE TABLE public.fila_teste_process_tasks (
    task_id bigint NOT NULL PRIMARY KEY,
    process_id varchar(190) NOT NULL,
    kind varchar(10) NOT NULL,
    response text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_process_tasks ON public.fila_teste_process_tasks (process_id, task_id);

-- A process's event history (emit), in the order written.
CREATE TABLE public.fila_teste_process_events (
    id bigserial PRIMARY KEY,
    process_id varchar(190) NOT NULL,
    task_id bigint,
    event_type varchar(100) NOT NULL,
    payload text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_process_events ON public.fila_teste_process_events (process_id, id);

-- The worker's hot path in one call: a task that succeeded becomes 'sucesso'
-- and its liveness lock is released, then the next ready tasks are claimed
-- ('processando', their liveness locks taken by the calling session), all in
-- the caller's transaction. One statement instead of two saves a fifth of the
-- worker's CPU per task. The planner settings hold for this function's own
-- statements only. Each is planned once per session (force_generic_plan): with
-- custom plans, the planner found every call's plan cheaper than the generic one
-- (the claim's LIMIT is a parameter) and planned each call anew, which cost as
-- much as the rest of the call (a partitioned table's plan opens every
-- partition too). The claim must walk the partial claim index in order and
-- stop at the limit even when the table's statistics are stale, and read the
-- running lock keys from their own index, in its order (no sort: with
-- statistics, the planner read them from the processo index, which holds every
-- ready row too; db/postgres/claim_sets.py).
CREATE OR REPLACE FUNCTION public.claim_next_fila_teste_v2(
    done_id bigint, done_mensagem text, lock_queue_key integer, done_task_key integer, claim_limit integer,
    handled_subscribers varchar[], handled_processos varchar[], worker_name varchar
)
RETURNS TABLE (task public.fila_teste, first_payload text, liveness_locked boolean)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    window_size integer := greatest(claim_limit * 8, 128);
    top_prioridade public.fila_teste.prioridade%TYPE;
    top_data_hora public.fila_teste.data_hora%TYPE;
    top_id public.fila_teste.id%TYPE;
    remembered text[];
    pos_prioridade public.fila_teste.prioridade%TYPE;
    pos_data_hora public.fila_teste.data_hora%TYPE;
    pos_id public.fila_teste.id%TYPE;
    pos_empty boolean := false;
    pos_fresh boolean := false;
    pos_edge_data_hora public.fila_teste.data_hora%TYPE := 'infinity';
    pos_edge_id public.fila_teste.id%TYPE := 9223372036854775807;
    now_us bigint;
    due_until timestamptz;
    looked_at timestamptz;
    edge_prioridade public.fila_teste.prioridade%TYPE;
    edge_data_hora public.fila_teste.data_hora%TYPE;
    edge_id public.fila_teste.id%TYPE;
    claimed bigint;
    more bigint;
    claimed_rec record;
    settled bigint;
    done_first bigint;
    -- A held claim (claim_query.sql), asked for by the transaction (SET LOCAL).
    hold boolean := coalesce(current_setting('nsjq.hold', true), '') = 'on';
    -- When and by whom this transaction's held claim claimed (read once: per row, the
    -- settings' reads cost a sixth of a settle's UPDATE).
    held_at timestamptz := nullif(current_setting('nsjq.held_at', true), '')::timestamptz;
    held_by varchar := nullif(current_setting('nsjq.held_by', true), '');
BEGIN
    IF done_id IS NOT NULL THEN
        UPDATE public.fila_teste AS d
        SET status = 'sucesso', mensagem = done_mensagem, finished_at = clock_timestamp(),
            started_at = coalesce(d.started_at, held_at),
            worker = coalesce(d.worker, held_by)
        -- status || '': by the primary key only (see the settle function below). A held
        -- row is 'pendente', locked by this transaction since its claim.
        WHERE d.id = done_id
          AND (d.status || '' = 'processando' OR (hold AND d.status || '' = 'pendente'))
        RETURNING coalesce(d.id_inicial, d.id) INTO done_first;
        GET DIAGNOSTICS settled = ROW_COUNT;
        -- After the UPDATE, whose row lock keeps the retry service away until the
        -- commit. Advisory unlocks are not transactional: the lock goes even when
        -- the fence below rolls the transaction back.
        PERFORM pg_advisory_unlock(lock_queue_key, done_task_key);
        -- The fence: an attempt that no longer owns its row (another worker rescued
        -- it, and its new attempt runs the handler again) must not commit its
        -- handler's writes. The error rolls the whole transaction back.
        IF settled = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'NQ001',
                MESSAGE = format('nsjq fenced: task %s is no longer ''processando''', done_id);
        END IF;
        -- Its children waiting for it (workflow/dependencies.py), released in this
        -- transaction. A child inserted meanwhile held the row's lock until its
        -- commit, which this statement's snapshot (taken after the UPDATE) sees.
        IF EXISTS (SELECT 1 FROM public.fila_teste_parents AS p WHERE p.parent_id = done_first) THEN
            PERFORM public.release_fila_teste(ARRAY[done_first]);
        END IF;
    END IF;
    IF claim_limit > 0 THEN
        IF hold THEN
            -- When and by whom the held rows were claimed: their outcome's write says it
            -- (started_at, worker), as the claim's own write does for the others.
            PERFORM set_config('nsjq.held_at', clock_timestamp()::text, true),
                    set_config('nsjq.held_by', worker_name, true);
        END IF;
        -- Where ready tasks began at this session's last look-up, while it is recent:
        -- '<queue key>,<fresh until>,<prioridade>,<data_hora>,<id>,<ready|empty>,<until>'
        -- (instants in microseconds since the epoch: exact, and no DateStyle or time
        -- zone a handler sets changes them; "empty": the look-up found nothing ready,
        -- see below). A custom setting of the session: it survives the commit, and goes
        -- with a rollback, as the claim does.
        remembered := string_to_array(current_setting('nsjq.claim_position', true), ',');
        now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
        IF remembered[1] = lock_queue_key::text
           AND coalesce(remembered[7], remembered[2])::bigint > now_us THEN
            pos_prioridade := remembered[3]::integer;
            pos_data_hora := to_timestamp(0) + remembered[4]::bigint * interval '1 microsecond';
            pos_id := remembered[5]::bigint;
            pos_empty := remembered[6] IS NOT DISTINCT FROM 'empty';
            pos_fresh := remembered[2]::bigint > now_us;
            -- The last row of the look-up's window (none: fewer ready rows than a window).
            IF coalesce(remembered[9], '') <> '' THEN
                pos_edge_data_hora := to_timestamp(0) + remembered[8]::bigint * interval '1 microsecond';
                pos_edge_id := remembered[9]::bigint;
            END IF;
        END IF;
        -- claim_query.sql, at most three times: lock_key's unique index of
        -- running keys refuses a row another claim took the key of since this
        -- statement's snapshot; claimed again, the snapshot sees the key busy.
        -- Each claimed row is returned with its retry's first payload (on the
        -- partitioned layout read by a statement of its own, for retries only:
        -- db/postgres/dialect.py says why); claimed counts them.
        -- On a partitioned table (db/postgres/layout.py) a row this statement's
        -- snapshot saw ready may have been claimed and settled since, which moved
        -- it to its day's partition: its lock is refused with a serialization
        -- failure instead of being skipped, before any row was updated or any
        -- lock taken; claimed again, the snapshot no longer sees it.
        FOR attempt IN 1..3 LOOP
            BEGIN
                claimed := 0;
                -- From the position on (the claim index from there, in claim order):
                -- between it and the first ready task lie only tasks claimed since the
                -- look-up. Claims that walked from the index's start walked every
                -- task claimed since the oldest snapshot still held elsewhere (a
                -- report's REPEATABLE READ, a replica's feedback): their entries stay
                -- until then, and the walk grew with every task (docs/internals/
                -- storage.md, "A held snapshot"). A task that becomes ready ahead of
                -- the position meanwhile (a higher prioridade, a retry, one given back)
                -- waits for the next look-up: claim order may lag by the position's
                -- life, never more. Nothing after it: a look-up at once (unless the
                -- position is an empty look-up's, below). A position has two lives:
                -- while fresh (20 times as long as its look-up took) "nothing after it"
                -- is followed by a look-up; after that, until its end (100 times, 5 s
                -- at most), a claim still takes what is after it first, and looks up
                -- only when nothing is: under a held snapshot the look-ups, which walk
                -- every entry it keeps, then come when the queue has drained, not in
                -- front of the tasks that just arrived.
                -- Where busy keys filled the look-up's window (below), window by window:
                -- from the position to that window's last row, then, when nothing there
                -- is claimable, the next window after it (the position's window from
                -- then on). A walk from the position to the end, looking for a group's
                -- worth, probed the key index for every keyed row it passed: the whole
                -- backlog of a busy process's calls at every claim (14 ms a claim at
                -- 3,000 queued calls, benchmarks/bench_key_backlog.py); a filter that let
                -- keyed rows through only up to the window's last row spared the probes
                -- but walked the backlog to its end once the window was claimed (calls to
                -- 3,000 processes drained at 0.75 of the walk's speed). Windows keep the
                -- claim order. No window kept, or nothing claimable in both: every row
                -- from the position, so that a claim says "nothing" only when nothing is
                -- claimable and a look-up is no more frequent than it was.
                IF pos_id IS NOT NULL THEN
                    IF pos_edge_id <> 9223372036854775807 THEN
                        RETURN QUERY WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM public.fila_teste AS q
    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND q.prioridade = pos_prioridade AND (q.data_hora, q.id) BETWEEN (pos_data_hora, pos_id) AND (pos_edge_data_hora, pos_edge_id)
      AND (q.lock_key IS NULL OR (q.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY(SELECT held.lock_key FROM public.fila_teste AS held WHERE held.lock_key IS NOT NULL AND held.status = 'processando' ORDER BY held.lock_key)) AS running(lock_key)) AND q.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = q.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (q.subscriber_id IS NULL OR handled_subscribers IS NULL OR q.subscriber_id = ANY(handled_subscribers)) AND (handled_processos IS NULL OR q.processo = ANY(handled_processos))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND (q.processo IS NULL OR q.processo NOT IN (SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM public.fila_teste_limits AS lim WHERE ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > clock_timestamp())) OR lim.breaker_open))) AS limited(processo)))
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT claim_limit
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE public.fila_teste AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, fa.payload,
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c
LEFT JOIN public.fila_teste AS fa ON fa.id = c.chain_id AND c.needs_payload
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;
                        IF claimed = 0 THEN
                            SELECT w.data_hora, w.id INTO edge_data_hora, edge_id
                            FROM public.fila_teste AS w
                            WHERE w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                              AND w.prioridade = pos_prioridade
                              AND (w.data_hora, w.id) > (pos_edge_data_hora, pos_edge_id)
                            ORDER BY w.prioridade DESC, w.data_hora, w.id
                            OFFSET window_size - 1 LIMIT 1;
                            IF edge_id IS NULL THEN
                                edge_data_hora := 'infinity';
                                edge_id := 9223372036854775807;
                            END IF;
                            RETURN QUERY WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM public.fila_teste AS q
    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND q.prioridade = pos_prioridade AND (q.data_hora, q.id) > (pos_edge_data_hora, pos_edge_id) AND (q.data_hora, q.id) <= (edge_data_hora, edge_id)
      AND (q.lock_key IS NULL OR (q.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY(SELECT held.lock_key FROM public.fila_teste AS held WHERE held.lock_key IS NOT NULL AND held.status = 'processando' ORDER BY held.lock_key)) AS running(lock_key)) AND q.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = q.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (q.subscriber_id IS NULL OR handled_subscribers IS NULL OR q.subscriber_id = ANY(handled_subscribers)) AND (handled_processos IS NULL OR q.processo = ANY(handled_processos))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND (q.processo IS NULL OR q.processo NOT IN (SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM public.fila_teste_limits AS lim WHERE ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > clock_timestamp())) OR lim.breaker_open))) AS limited(processo)))
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT claim_limit
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE public.fila_teste AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, fa.payload,
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c
LEFT JOIN public.fila_teste AS fa ON fa.id = c.chain_id AND c.needs_payload
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;
                            IF claimed > 0 THEN
                                -- The next window is the position's from now on.
                                PERFORM set_config('nsjq.claim_position', concat_ws(',',
                                    remembered[1], remembered[2], remembered[3], remembered[4],
                                    remembered[5], remembered[6], remembered[7],
                                    CASE WHEN edge_id <> 9223372036854775807
                                         THEN (extract(epoch FROM edge_data_hora) * 1000000)::bigint
                                    END,
                                    CASE WHEN edge_id <> 9223372036854775807 THEN edge_id END),
                                    false);
                            END IF;
                        END IF;
                    END IF;
                    IF claimed = 0 THEN
                        RETURN QUERY WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM public.fila_teste AS q
    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND q.prioridade = pos_prioridade AND (q.data_hora, q.id) >= (pos_data_hora, pos_id)
      AND (q.lock_key IS NULL OR (q.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY(SELECT held.lock_key FROM public.fila_teste AS held WHERE held.lock_key IS NOT NULL AND held.status = 'processando' ORDER BY held.lock_key)) AS running(lock_key)) AND q.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = q.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (q.subscriber_id IS NULL OR handled_subscribers IS NULL OR q.subscriber_id = ANY(handled_subscribers)) AND (handled_processos IS NULL OR q.processo = ANY(handled_processos))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND (q.processo IS NULL OR q.processo NOT IN (SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM public.fila_teste_limits AS lim WHERE ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > clock_timestamp())) OR lim.breaker_open))) AS limited(processo)))
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT claim_limit
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE public.fila_teste AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, fa.payload,
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c
LEFT JOIN public.fila_teste AS fa ON fa.id = c.chain_id AND c.needs_payload
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;
                    END IF;
                    IF claimed > 0 THEN
                        RETURN;
                    END IF;
                    -- After a look-up that found nothing ready, for its position's life:
                    -- what became ready since is after it (its prioridade: just walked)
                    -- or among the due index's entries since a second before the look-up
                    -- (any prioridade). Neither: nothing, without a look-up. Under a held
                    -- snapshot every look-up of an idle queue walked the entries of all
                    -- the tasks claimed since the snapshot; now a session does one per
                    -- position life. Missed: a row that became ready since with an older
                    -- data_hora (a transaction open for over a second, a task given back
                    -- or released, a past data_hora given at enqueue), found at the next
                    -- claim after the position's life, which the dispatcher makes sure of
                    -- (claim_recheck_seconds, runtime/dispatcher.py).
                    IF pos_empty AND pos_fresh THEN
                        due_until := clock_timestamp();
                        -- The due index's own predicate, so that no other partial
                        -- index (the processo index holds every running entry) fits.
                        PERFORM 1 FROM public.fila_teste AS w
                        WHERE w.status IN ('pendente', 'agendada')
                          AND w.data_hora >= pos_data_hora AND w.data_hora <= due_until
                        LIMIT 1;
                        IF NOT FOUND THEN
                            RETURN;
                        END IF;
                    END IF;
                END IF;
                looked_at := clock_timestamp();
                -- The look-up walks the claim index from its start once: to the first
                -- ready row. Under a held snapshot that walk passes the entries of every
                -- task claimed since the snapshot, so it is the only one: nothing ready
                -- ends the look-up, and the window and the claims start from that row
                -- (the index scan's lower bound). A row that became ready ahead of it
                -- since waits for the next look-up, as one ahead of a position does.
                SELECT w.prioridade, w.data_hora, w.id INTO top_prioridade, top_data_hora, top_id
                FROM public.fila_teste AS w
                WHERE w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                ORDER BY w.prioridade DESC, w.data_hora, w.id
                LIMIT 1;
                IF top_id IS NULL THEN
                    -- The empty look-up's position (read above): a second before it, in
                    -- the prioridade of the session's last position (none: no position).
                    -- Its life counts from the look-up's start, so the dispatcher's
                    -- recheck comes after it ends.
                    IF remembered[1] = lock_queue_key::text AND remembered[3] IS NOT NULL THEN
                        PERFORM set_config('nsjq.claim_position', concat_ws(',',
                            lock_queue_key,
                            (extract(epoch FROM looked_at) * 1000000
                             + 1000000 * least(2.0, greatest(0.02,
                                 20 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint,
                            remembered[3],
                            (extract(epoch FROM looked_at - interval '1 second') * 1000000)::bigint,
                            0,
                            'empty',
                            (extract(epoch FROM looked_at) * 1000000
                             + 1000000 * least(5.0, greatest(0.02,
                                 100 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint),
                            false);
                    END IF;
                    RETURN;
                END IF;
                pos_prioridade := top_prioridade;
                pos_data_hora := top_data_hora;
                pos_id := top_id;
                -- First among the first ready rows only (the window: eight per task asked
                -- for, of the first row's prioridade, its edge read from the claim index
                -- without a probe). A claim that finds fewer than claim_limit walks every
                -- ready row to the end, two probes each for a keyed row: with most keys
                -- busy (more executor slots than keys) nearly every claim did (issue 19).
                -- The window's claimable rows are the ones the whole walk would claim
                -- first, in the same order; rows beyond it wait for the next claim. Fewer
                -- ready rows of that prioridade than a window, or nothing claimable in
                -- it: every ready row from the first on, that prioridade's then the lower
                -- ones' (the same claim order as one walk), so a claim still says
                -- "nothing" only when nothing is claimable.
                SELECT w.prioridade, w.data_hora, w.id
                INTO edge_prioridade, edge_data_hora, edge_id
                FROM public.fila_teste AS w
                WHERE w.status = 'pendente' AND w.data_hora <= clock_timestamp()
                  AND w.prioridade = top_prioridade
                  AND (w.data_hora, w.id) >= (top_data_hora, top_id)
                ORDER BY w.prioridade DESC, w.data_hora, w.id
                OFFSET window_size - 1 LIMIT 1;
                IF edge_id IS NOT NULL THEN
                    RETURN QUERY WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM public.fila_teste AS q
    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND q.prioridade = edge_prioridade AND (q.data_hora, q.id) BETWEEN (top_data_hora, top_id) AND (edge_data_hora, edge_id)
      AND (q.lock_key IS NULL OR (q.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY(SELECT held.lock_key FROM public.fila_teste AS held WHERE held.lock_key IS NOT NULL AND held.status = 'processando' ORDER BY held.lock_key)) AS running(lock_key)) AND q.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = q.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (q.subscriber_id IS NULL OR handled_subscribers IS NULL OR q.subscriber_id = ANY(handled_subscribers)) AND (handled_processos IS NULL OR q.processo = ANY(handled_processos))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND (q.processo IS NULL OR q.processo NOT IN (SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM public.fila_teste_limits AS lim WHERE ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > clock_timestamp())) OR lim.breaker_open))) AS limited(processo)))
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT claim_limit
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE public.fila_teste AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, fa.payload,
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c
LEFT JOIN public.fila_teste AS fa ON fa.id = c.chain_id AND c.needs_payload
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;
                    -- The position keeps the window's last row (its claims go window by
                    -- window, below) only when the window gave fewer than asked while
                    -- keyed tasks run: busy keys' queued tasks fill it. Otherwise its
                    -- claims walk on from it, one statement each: windows cost a plain
                    -- drain a statement to find each next window's last row, and a claim
                    -- more whenever a window runs out (with 8 executors other sessions
                    -- empty a window first: 16% more database CPU per task, paired).
                    IF claimed >= claim_limit OR NOT EXISTS (
                        SELECT 1 FROM public.fila_teste AS w
                        WHERE w.lock_key IS NOT NULL AND w.status = 'processando'
                    ) THEN
                        edge_data_hora := NULL;
                        edge_id := NULL;
                    END IF;
                END IF;
                IF claimed = 0 THEN
                    -- Every ready row from the first on.
                    RETURN QUERY WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM public.fila_teste AS q
    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND q.prioridade = pos_prioridade AND (q.data_hora, q.id) >= (pos_data_hora, pos_id)
      AND (q.lock_key IS NULL OR (q.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY(SELECT held.lock_key FROM public.fila_teste AS held WHERE held.lock_key IS NOT NULL AND held.status = 'processando' ORDER BY held.lock_key)) AS running(lock_key)) AND q.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = q.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (q.subscriber_id IS NULL OR handled_subscribers IS NULL OR q.subscriber_id = ANY(handled_subscribers)) AND (handled_processos IS NULL OR q.processo = ANY(handled_processos))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND (q.processo IS NULL OR q.processo NOT IN (SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM public.fila_teste_limits AS lim WHERE ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > clock_timestamp())) OR lim.breaker_open))) AS limited(processo)))
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT claim_limit
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE public.fila_teste AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, fa.payload,
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c
LEFT JOIN public.fila_teste AS fa ON fa.id = c.chain_id AND c.needs_payload
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;
                    IF claimed < claim_limit THEN
                        RETURN QUERY WITH next AS (
    SELECT q.id, q AS locked_row, hold AND q.lock_key IS NULL AND q.timeout_s IS NULL AS held
    FROM public.fila_teste AS q
    WHERE q.status = 'pendente' AND q.data_hora <= clock_timestamp()
      AND q.prioridade < top_prioridade
      AND (q.lock_key IS NULL OR (q.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY(SELECT held.lock_key FROM public.fila_teste AS held WHERE held.lock_key IS NOT NULL AND held.status = 'processando' ORDER BY held.lock_key)) AS running(lock_key)) AND q.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = q.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
      AND (q.subscriber_id IS NULL OR handled_subscribers IS NULL OR q.subscriber_id = ANY(handled_subscribers)) AND (handled_processos IS NULL OR q.processo = ANY(handled_processos))
      AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND (q.processo IS NULL OR q.processo NOT IN (SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM public.fila_teste_limits AS lim WHERE ((lim.max_concurrent IS NOT NULL OR lim.rate_count IS NOT NULL OR lim.interval_min_s IS NOT NULL OR lim.time_windows IS NOT NULL OR lim.max_concurrent_per_key IS NOT NULL) OR (lim.paused AND (lim.paused_until IS NULL OR lim.paused_until > clock_timestamp())) OR lim.breaker_open))) AS limited(processo)))
    ORDER BY q.prioridade DESC, q.data_hora, q.id
    LIMIT claim_limit - claimed
    FOR UPDATE SKIP LOCKED
), written AS (
    UPDATE public.fila_teste AS t
    SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
    FROM next
    WHERE t.id = next.id AND NOT next.held
    RETURNING t AS claimed_row, t.id AS claimed_id, t.id_inicial AS chain_id,
              t.payload IS NULL AS needs_payload, t.prioridade AS claimed_prioridade,
              t.data_hora AS claimed_data_hora
), claimed AS (
    SELECT * FROM written
    UNION ALL
    SELECT n.locked_row, (n.locked_row).id, (n.locked_row).id_inicial,
           (n.locked_row).payload IS NULL, (n.locked_row).prioridade, (n.locked_row).data_hora
    FROM next AS n
    WHERE n.held
)
SELECT c.claimed_row, fa.payload,
       pg_try_advisory_lock(lock_queue_key, (c.claimed_id % 2147483648)::int4) AS claimed_lock
FROM claimed AS c
LEFT JOIN public.fila_teste AS fa ON fa.id = c.chain_id AND c.needs_payload
ORDER BY c.claimed_prioridade DESC, c.claimed_data_hora, c.claimed_id;
                    GET DIAGNOSTICS more = ROW_COUNT;
                    claimed := claimed + more;
                    END IF;
                END IF;
                -- The position is fresh 20 times as long as this look-up took, 20 ms at
                -- least and 2 s at most: look-ups never take more than a twentieth of the
                -- claims' time, however many entries a held snapshot keeps. It ends at
                -- 100 times, 5 s at most.
                IF top_id IS NOT NULL THEN
                    PERFORM set_config('nsjq.claim_position', concat_ws(',',
                        lock_queue_key,
                        (extract(epoch FROM clock_timestamp()) * 1000000
                         + 1000000 * least(2.0, greatest(0.02,
                             20 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint,
                        top_prioridade,
                        (extract(epoch FROM top_data_hora) * 1000000)::bigint,
                        top_id,
                        'ready',
                        (extract(epoch FROM clock_timestamp()) * 1000000
                         + 1000000 * least(5.0, greatest(0.02,
                             100 * extract(epoch FROM clock_timestamp() - looked_at))))::bigint,
                        -- The window's last row (none: fewer ready rows than a window, or
                        -- a window that gave what was asked, above).
                        (extract(epoch FROM edge_data_hora) * 1000000)::bigint,
                        edge_id),
                        false);
                END IF;
                RETURN;
            EXCEPTION WHEN unique_violation OR serialization_failure THEN
                NULL;
            END;
        END LOOP;
    END IF;
END;
$$;
-- Workers check this at start: a function of another version stops them
-- with a message naming db_gen --upgrade.
COMMENT ON FUNCTION public.claim_next_fila_teste_v2(bigint, text, integer, integer, integer, varchar[], varchar[], varchar)
    IS 'nsj_queue_lib claim cf7991c0ea19fe7e';

-- A commit group's successes (db/postgres/group_wire.py): each task 'sucesso'
-- with its mensagem, then the liveness locks released, in the caller's
-- transaction. The locks go only after the UPDATE holds every row: released
-- first, a task would be 'processando' without its lock (committed) and not
-- locked by this transaction, which the retry service reads as abandoned
-- (issue 36). The fence: when a task is no longer 'processando' (rescued by
-- another worker), the error rolls the group's transaction back, its
-- handlers' writes with it; the group gives its other tasks back.
-- No sequential scans: each session plans these statements once, often while the
-- queue's side tables are still empty, and a plan made then read every edge of
-- <queue>_parents at every settle afterwards (a 1 -> 10,000 fan-out's children
-- drained at half the rate of independent tasks, each group's look for children
-- reading the 10,000 edges).
CREATE OR REPLACE FUNCTION public.settle_fila_teste_v2(
    done_ids bigint[], done_mensagens text[], lock_queue_key integer
)
RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    settled bigint;
    fenced bigint[];
    firsts bigint[];
    hold boolean := coalesce(current_setting('nsjq.hold', true), '') = 'on';
    held_at timestamptz := nullif(current_setting('nsjq.held_at', true), '')::timestamptz;
    held_by varchar := nullif(current_setting('nsjq.held_by', true), '');
BEGIN
    -- Each row's mensagem by its id's position (a join with the unnested arrays
    -- became a nested loop over them once planned generically with a backlog).
    -- The rows by their primary key only: status || '' is no condition a partial
    -- index's predicate implies. Planned generically on a hot table of few live rows,
    -- the plain status = 'processando' read every entry of the processo index's
    -- running rows instead, dead ones included: under a held snapshot, every task
    -- run since it began (189,000 entries a settle, 31 million in 5 s, at minute 7
    -- of benchmarks/bench_held_horizon.py).
    WITH done AS (
        UPDATE public.fila_teste AS t
        SET status = 'sucesso', mensagem = done_mensagens[array_position(done_ids, t.id)],
            finished_at = clock_timestamp(),
            started_at = coalesce(t.started_at, held_at),
            worker = coalesce(t.worker, held_by)
        WHERE t.id = ANY(done_ids)
          AND (t.status || '' = 'processando' OR (hold AND t.status || '' = 'pendente'))
        RETURNING coalesce(t.id_inicial, t.id) AS first_id
    )
    SELECT count(*), array_agg(done.first_id) INTO settled, firsts FROM done;
    PERFORM pg_advisory_unlock(lock_queue_key, (done.id % 2147483648)::int4)
    FROM unnest(done_ids) AS done(id);
    IF settled < cardinality(done_ids) THEN
        SELECT array_agg(done.id ORDER BY done.id) INTO fenced
        FROM unnest(done_ids) AS done(id)
        WHERE NOT EXISTS (
            SELECT 1 FROM public.fila_teste AS t WHERE t.id = done.id AND t.status = 'sucesso'
        );
        RAISE EXCEPTION USING ERRCODE = 'NQ001',
            MESSAGE = format('nsjq fenced: tasks %s are no longer ''processando''', fenced);
    END IF;
    -- Their children waiting for them, released in this transaction (as in the
    -- claim function).
    IF EXISTS (SELECT 1 FROM public.fila_teste_parents AS p WHERE p.parent_id = ANY(firsts)) THEN
        PERFORM public.release_fila_teste(firsts);
    END IF;
    RETURN settled;
END;
$$;

-- Subscribers of pub/sub and webhook publications.
CREATE TABLE public.fila_teste_subscriber (
    id varchar(100) NOT NULL PRIMARY KEY,
    tenant bigint,
    grupo_empresarial varchar(40),
    processo varchar(250) NOT NULL,
    url varchar(2048),
    http_method varchar(8),
    headers json,
    ativo boolean NOT NULL DEFAULT true,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    -- The subscriber's circuit breaker (docs/fleet-control.md): after
    -- circuit_breaker_failures consecutive failed webhook deliveries, none is
    -- made for circuit_breaker_cool_down_s seconds, then one trial decides
    -- (NULL: no breaker). Its state, as the limits table's processo breakers
    -- keep theirs: the consecutive failures, open until breaker_until, the trial
    -- taken (when, which task).
    circuit_breaker_failures integer,
    circuit_breaker_cool_down_s double precision,
    breaker_failures integer NOT NULL DEFAULT 0,
    breaker_open boolean NOT NULL DEFAULT false,
    breaker_until timestamp with time zone,
    breaker_trial boolean NOT NULL DEFAULT false,
    breaker_trial_at timestamp with time zone,
    breaker_trial_task bigint
);
CREATE INDEX IF NOT EXISTS idx_fila_teste_subscriber_processo ON public.fila_teste_subscriber (processo, tenant, grupo_empresarial);

-- Periodic tasks (docs/periodic-tasks.md): the latest slot enqueued per processo.
-- Workers move last_slot forward with a conditional UPDATE in the transaction
-- that inserts the slot's task, so a slot is enqueued once in the cluster.
CREATE TABLE public.fila_teste_periodic (
    processo varchar(250) NOT NULL PRIMARY KEY,
    last_slot bigint NOT NULL,  -- Unix seconds (UTC) of the latest slot enqueued
    task_id bigint,
    updated_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
-- The workers running on the queue (issue 37): each writes its row at start and
-- every heartbeat, with the processos it claims (a JSON array; NULL: every
-- processo), and deletes it when it stops. nsjq status names the ready
-- processos no live worker claims.
CREATE TABLE public.fila_teste_workers (
    worker varchar(200) NOT NULL PRIMARY KEY,
    processos text,
    started_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    seen_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
-- Counts of the queue's finished attempts (nsjq status; db/tally.py): the tally
-- service folds the attempts in order of id, per hour of data_hora (hours since
-- 1970-01-01 UTC), processo ('' for none) and status, so that status reads the
-- backlog, this table and the attempts since the last fold instead of the whole
-- history. Attempts unfinished when their ids were folded wait in the open
-- table until they end; the state table says how far the ids are folded.
CREATE TABLE public.fila_teste_tally (
    hour bigint NOT NULL,
    processo varchar(250) NOT NULL,
    status varchar(100) NOT NULL,
    tasks bigint NOT NULL,
    failed bigint NOT NULL,
    dead bigint NOT NULL,
    PRIMARY KEY (hour, processo, status)
);
CREATE TABLE public.fila_teste_tally_open (
    id bigint NOT NULL PRIMARY KEY
);
CREATE TABLE public.fila_teste_tally_state (
    id integer NOT NULL PRIMARY KEY CHECK (id = 1),
    folded_to bigint NOT NULL,
    seen bigint NOT NULL,
    folded_at timestamp with time zone
);
-- Commit groups that hold their tasks without writing them (QUEUE_ONE_WRITE,
-- docs/internals/one-write.md): a group's claim locks its rows, 'pendente',
-- and its worker writes this row on a connection of its own before the first
-- handler runs; the group's commit deletes it. A row whose tasks are still
-- 'pendente' and locked by nobody is a group whose worker died mid-way: the
-- retry service writes those tasks 'processando' and rescues them, which
-- counts their attempt (a task that kills its worker is dead-lettered, not
-- run for ever). Unlogged: a row matters only while its worker lives, and a
-- database crash that empties the table rolls every group back too.
CREATE UNLOGGED TABLE public.fila_teste_groups (
    -- The worker's name, its process and start, and the group's number there.
    id varchar(400) PRIMARY KEY,
    worker varchar(200) NOT NULL,
    task_ids bigint[] NOT NULL,
    started_at timestamp with time zone NOT NULL DEFAULT clock_timestamp()
);
-- Per-processo limits (docs/flow-control.md): one row per limited processo,
-- written by the workers at start from their @Task declarations, with the
-- state the limited claim shares across the cluster (the next start an
-- interval allows, the rate limiter's theoretical arrival time).
CREATE TABLE public.fila_teste_limits (
    processo varchar(250) NOT NULL PRIMARY KEY,
    max_concurrent integer,
    rate_count integer,
    rate_period_s double precision,
    interval_min_s double precision,
    interval_max_s double precision,
    time_windows varchar(4000),
    next_start_at timestamp with time zone,
    rate_tat timestamp with time zone,
    declared_by varchar(200),
    declared_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    -- A pause (docs/fleet-control.md): no task of the processo ('' : of the
    -- queue) starts while paused, until paused_until (NULL: until resumed).
    paused boolean NOT NULL DEFAULT false,
    paused_until timestamp with time zone,
    -- The processo's circuit breaker (docs/fleet-control.md): its consecutive
    -- failures; open (no task starts until breaker_until, then one trial at a
    -- time); the trial started and not decided yet, when it started and its
    -- task (only that task's outcome decides; a trial undecided for too long
    -- counts as failed: fleet/breaker_recorder.py).
    breaker_failures integer NOT NULL DEFAULT 0,
    breaker_open boolean NOT NULL DEFAULT false,
    breaker_until timestamp with time zone,
    breaker_trial boolean NOT NULL DEFAULT false,
    breaker_trial_at timestamp with time zone,
    breaker_trial_task bigint,
    -- At most this many running tasks of the processo per fair_key (NULL: no
    -- cap; unkeyed tasks are never counted). Last: --upgrade appends it.
    max_concurrent_per_key integer
);

-- The limited claim: the start of a task of a processo with limits.
-- The limited claim (per-processo limits, docs/flow-control.md): the next
-- start of a limited processo, in one call, in the caller's transaction.
-- 1. Without locks, the processo whose next start comes first among those
--    with a ready task, if it comes within early_s seconds (most calls end
--    here: nothing may start yet).
-- 2. Its limits row locked (waiting for a claim of it that holds the row),
--    then its state read again by a statement of its own, whose snapshot is
--    taken after the lock: the count of its running tasks cannot miss
--    another claim's task.
-- 3. The wait until the start is due, here, holding the row: the worker
--    calls up to early_s ahead, and the task starts at the due moment of the
--    database's clock (pg_sleep wakes up to a millisecond late: it sleeps to
--    a millisecond before, then looks at the clock until the moment).
-- 4. One ready task of the processo in claim order marked 'processando'
--    (one the unique index of running lock keys refuses is skipped: another
--    claim took its key after this statement's snapshot; the next statement
--    sees the key busy; one whose fair_key is at max_concurrent_per_key is
--    passed over, not claimed), and the processo's state moved on: the next start
--    interval_s allows, drawn from [min, max] after this start, and the rate
--    limiter's theoretical arrival time, which a late start may leave at
--    most 0.08 of the period behind it.
-- The row returned: the task (all NULL when none), the first attempt's
-- payload when the task has none, its liveness lock (take_lock), the seconds
-- until the next start may be due (NULL: no limited processo has a ready
-- task; a processo at its max_concurrent, or whose every ready task's fair_key
-- is at max_concurrent_per_key, counts 1.0 s), the number of
-- limits rows, and whether a processo has time windows the worker does not
-- know (it reads the declarations again). Time windows are judged by the
-- worker: open_windows and known_windows hold md5(processo, newline,
-- time_windows) of the open ones and of all it knows (flow/limits.py).
CREATE OR REPLACE FUNCTION public.claim_limited_fila_teste_v2(
    open_windows text[], known_windows text[], early_s double precision, take_lock boolean,
    lock_queue_key integer, handled_processos varchar[], worker_name varchar
)
RETURNS TABLE (task public.fila_teste, first_payload text, liveness_locked boolean, wait_s double precision,
               limits_rows bigint, stale_windows boolean)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_chosen varchar;
    v_due_in double precision;
    v_due_at timestamptz;
    v_claimed public.fila_teste;
    v_first_payload text;
BEGIN
    SELECT s.processo, s.due_in INTO v_chosen, v_due_in
    FROM (SELECT l.processo, extract(epoch FROM GREATEST(CASE WHEN l.interval_min_s IS NOT NULL THEN l.next_start_at END, CASE WHEN l.rate_count IS NOT NULL THEN l.rate_tat END, CASE WHEN l.breaker_open THEN l.breaker_until END) - clock_timestamp())::float8 AS due_in, ((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM public.fila_teste AS r WHERE r.processo = l.processo AND r.status = 'processando')) OR (l.max_concurrent_per_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))))) AS capped FROM public.fila_teste_limits AS l WHERE (l.time_windows IS NULL OR md5(l.processo || chr(10) || l.time_windows) = ANY(open_windows)) AND (handled_processos IS NULL OR l.processo = ANY(handled_processos)) AND ((l.max_concurrent IS NOT NULL OR l.rate_count IS NOT NULL OR l.interval_min_s IS NOT NULL OR l.time_windows IS NOT NULL OR l.max_concurrent_per_key IS NOT NULL) OR l.breaker_open) AND NOT (l.paused AND (l.paused_until IS NULL OR l.paused_until > clock_timestamp())) AND NOT (l.breaker_open AND l.breaker_trial) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open))) AS s
    WHERE NOT s.capped AND (s.due_in IS NULL OR s.due_in <= early_s)
    ORDER BY s.due_in NULLS FIRST, s.processo
    LIMIT 1;
    IF v_chosen IS NOT NULL THEN
        PERFORM 1 FROM public.fila_teste_limits AS l WHERE l.processo = v_chosen FOR UPDATE;
        SELECT s.due_in INTO v_due_in
        FROM (SELECT l.processo, extract(epoch FROM GREATEST(CASE WHEN l.interval_min_s IS NOT NULL THEN l.next_start_at END, CASE WHEN l.rate_count IS NOT NULL THEN l.rate_tat END, CASE WHEN l.breaker_open THEN l.breaker_until END) - clock_timestamp())::float8 AS due_in, ((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM public.fila_teste AS r WHERE r.processo = l.processo AND r.status = 'processando')) OR (l.max_concurrent_per_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))))) AS capped FROM public.fila_teste_limits AS l WHERE (l.time_windows IS NULL OR md5(l.processo || chr(10) || l.time_windows) = ANY(open_windows)) AND (handled_processos IS NULL OR l.processo = ANY(handled_processos)) AND ((l.max_concurrent IS NOT NULL OR l.rate_count IS NOT NULL OR l.interval_min_s IS NOT NULL OR l.time_windows IS NOT NULL OR l.max_concurrent_per_key IS NOT NULL) OR l.breaker_open) AND NOT (l.paused AND (l.paused_until IS NULL OR l.paused_until > clock_timestamp())) AND NOT (l.breaker_open AND l.breaker_trial) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open))) AS s
        WHERE s.processo = v_chosen AND NOT s.capped AND (s.due_in IS NULL OR s.due_in <= early_s);
        IF NOT FOUND THEN
            v_chosen := NULL;
        END IF;
    END IF;
    IF v_chosen IS NOT NULL THEN
        IF v_due_in > 0 THEN
            v_due_at := clock_timestamp() + v_due_in * interval '1 second';
            IF v_due_in > 0.002 THEN
                PERFORM pg_sleep(v_due_in - 0.001);
            END IF;
            WHILE clock_timestamp() < v_due_at LOOP
            END LOOP;
        END IF;
        FOR attempt IN 1..3 LOOP
            BEGIN
                WITH picked AS (
                    SELECT t.id
                    FROM public.fila_teste AS t
                    WHERE t.processo = v_chosen AND t.status = 'pendente'
                      AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1)))
                      AND NOT (t.dead AND EXISTS (SELECT 1 FROM public.fila_teste_limits AS b WHERE b.processo = t.processo AND b.breaker_open)) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))
                    ORDER BY t.prioridade DESC, t.data_hora, t.id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE public.fila_teste AS t
                SET status = 'processando', started_at = clock_timestamp(), worker = worker_name
                FROM picked
                WHERE t.id = picked.id
                RETURNING t.* INTO v_claimed;
                EXIT;
            EXCEPTION WHEN unique_violation THEN
                v_claimed := NULL;
            END;
        END LOOP;
        IF v_claimed.id IS NOT NULL THEN
            UPDATE public.fila_teste_limits AS l
            SET next_start_at = CASE
                    WHEN l.interval_min_s IS NULL THEN l.next_start_at
                    ELSE clock_timestamp() + (l.interval_min_s
                         + random() * (l.interval_max_s - l.interval_min_s)) * interval '1 second'
                END,
                rate_tat = CASE
                    WHEN l.rate_count IS NULL THEN l.rate_tat
                    ELSE GREATEST(l.rate_tat,
                                  clock_timestamp() - 0.08 * l.rate_period_s * interval '1 second')
                         + l.rate_period_s / l.rate_count * interval '1 second'
                END,
                -- An open circuit breaker's task is its trial: no other starts until it is
                -- decided. Its id and start let only its outcome decide, and let a trial
                -- whose outcome never came be told (fleet/breaker_recorder.py).
                breaker_trial = l.breaker_open,
                breaker_trial_at = CASE WHEN l.breaker_open THEN clock_timestamp() END,
                breaker_trial_task = CASE WHEN l.breaker_open THEN v_claimed.id END
            WHERE l.processo = v_chosen;
        END IF;
    END IF;
    -- A retry's payload, on its first attempt, by a statement of its own run for
    -- retries only: in the statement below it put every day partition in its plan.
    IF v_claimed.payload IS NULL AND v_claimed.id_inicial IS NOT NULL THEN
        SELECT f.payload INTO v_first_payload FROM public.fila_teste AS f WHERE f.id = v_claimed.id_inicial;
    END IF;
    RETURN QUERY
    SELECT v_claimed,
           v_first_payload,
           CASE WHEN take_lock AND v_claimed.id IS NOT NULL
                THEN pg_try_advisory_lock(lock_queue_key, (v_claimed.id % 2147483648)::int4) END,
           (SELECT min(CASE WHEN s.capped THEN 1.0 ELSE GREATEST(s.due_in, 0) END)
            FROM (SELECT l.processo, extract(epoch FROM GREATEST(CASE WHEN l.interval_min_s IS NOT NULL THEN l.next_start_at END, CASE WHEN l.rate_count IS NOT NULL THEN l.rate_tat END, CASE WHEN l.breaker_open THEN l.breaker_until END) - clock_timestamp())::float8 AS due_in, ((l.max_concurrent IS NOT NULL AND l.max_concurrent <= (SELECT count(*) FROM public.fila_teste AS r WHERE r.processo = l.processo AND r.status = 'processando')) OR (l.max_concurrent_per_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open) AND (t.fair_key IS NULL OR (t.processo, t.fair_key) NOT IN (SELECT c.processo, c.fair_key FROM public.fila_teste AS c JOIN public.fila_teste_limits AS k ON k.processo = c.processo WHERE k.max_concurrent_per_key IS NOT NULL AND c.status = 'processando' AND c.fair_key IS NOT NULL GROUP BY c.processo, c.fair_key, k.max_concurrent_per_key HAVING count(*) >= k.max_concurrent_per_key))))) AS capped FROM public.fila_teste_limits AS l WHERE (l.time_windows IS NULL OR md5(l.processo || chr(10) || l.time_windows) = ANY(open_windows)) AND (handled_processos IS NULL OR l.processo = ANY(handled_processos)) AND ((l.max_concurrent IS NOT NULL OR l.rate_count IS NOT NULL OR l.interval_min_s IS NOT NULL OR l.time_windows IS NOT NULL OR l.max_concurrent_per_key IS NOT NULL) OR l.breaker_open) AND NOT (l.paused AND (l.paused_until IS NULL OR l.paused_until > clock_timestamp())) AND NOT (l.breaker_open AND l.breaker_trial) AND NOT EXISTS (SELECT 1 FROM public.fila_teste_limits AS qp WHERE qp.processo = '' AND (qp.paused AND (qp.paused_until IS NULL OR qp.paused_until > clock_timestamp()))) AND EXISTS (SELECT 1 FROM public.fila_teste AS t WHERE t.processo = l.processo AND t.status = 'pendente' AND t.data_hora <= clock_timestamp() AND (t.lock_key IS NULL OR (NOT EXISTS (SELECT 1 FROM public.fila_teste AS held WHERE held.lock_key = t.lock_key AND held.status = 'processando') AND t.id = (SELECT head.id FROM public.fila_teste AS head WHERE head.lock_key = t.lock_key AND head.status = 'pendente' AND head.data_hora <= clock_timestamp() ORDER BY head.prioridade DESC, head.data_hora, head.id LIMIT 1))) AND NOT (t.dead AND l.breaker_open))) AS s),
           (SELECT count(*) FROM public.fila_teste_limits),
           EXISTS (SELECT 1 FROM public.fila_teste_limits AS l
                   WHERE l.time_windows IS NOT NULL
                     AND NOT md5(l.processo || chr(10) || l.time_windows) = ANY(known_windows));
END;
$$;
-- Workers check this at start: a function of another version stops them
-- with a message naming db_gen --upgrade.
COMMENT ON FUNCTION public.claim_limited_fila_teste_v2(text[], text[], double precision, boolean, integer, varchar[], varchar)
    IS 'nsj_queue_lib limited claim bf6a0c424d1cec32';
