-- 0007_notify_listeners: wake-ups only when someone follows.
--
-- Why: every append sent NOTIFY cwstore, and PostgreSQL queues a notification under
-- one lock for the whole server at commit, whether or not any session listens: with
-- 16 writers on separate graphs it cost about a quarter of the throughput (1,700 ->
-- 1,300 appends/s on the test machine). Followers (the clients' tail and tail_all) now
-- register in cwstore.listeners after they LISTEN, and the nodes trigger notifies only
-- while the table holds a row. NOTIFY stays a hint: a follower that registers while a
-- write is in flight may miss that one wake-up and finds the node at its next poll
-- (the clients poll every second anyway).
--
-- Safe with live writers: yes. The trigger functions are replaced in place; their text
-- is taken from the catalog and only the NOTIFY clause changes (checked below).

CREATE UNLOGGED TABLE cwstore.listeners (
  pid     integer NOT NULL,
  since   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT listeners_pkey PRIMARY KEY (pid)
);
COMMENT ON TABLE cwstore.listeners IS
  'Backends that LISTEN on channel cwstore (cwstore.listen_v1): the nodes trigger sends its wake-up only while this table holds a row. Unlogged: after a crash nobody listens.';

-- listen_v1(): register this backend as a follower (call it after LISTEN cwstore), and
-- forget backends that are gone. unlisten_v1(): undo it. Both run as the owner, so
-- readers may follow without any write privilege.
CREATE FUNCTION cwstore.listen_v1() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  DELETE FROM cwstore.listeners l
   WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = l.pid);
  INSERT INTO cwstore.listeners (pid) VALUES (pg_catalog.pg_backend_pid())
  ON CONFLICT (pid) DO NOTHING;
$$;
COMMENT ON FUNCTION cwstore.listen_v1() IS
  'Register this backend as a follower of channel cwstore (after LISTEN cwstore), so appends send their wake-up NOTIFY.';

CREATE FUNCTION cwstore.unlisten_v1() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  DELETE FROM cwstore.listeners WHERE pid = pg_catalog.pg_backend_pid();
$$;
COMMENT ON FUNCTION cwstore.unlisten_v1() IS
  'Undo listen_v1 for this backend.';

DO $do$
DECLARE
  f text;
  src text;
  old_clause constant text :=
    'SELECT pg_notify(''cwstore'', u.graph_id || '':'' || u.length) FROM u';
  new_clause constant text :=
    'SELECT CASE WHEN EXISTS (SELECT 1 FROM cwstore.listeners) '
    'THEN pg_notify(''cwstore'', u.graph_id || '':'' || u.length) END FROM u';
BEGIN
  FOREACH f IN ARRAY ARRAY['_nodes_inserted_small', '_nodes_inserted_bulk'] LOOP
    SELECT p.prosrc INTO src FROM pg_catalog.pg_proc p
     WHERE p.oid = format('cwstore.%I', f)::regproc;
    IF strpos(src, old_clause) = 0 THEN
      RAISE EXCEPTION 'cwstore.%() does not hold the NOTIFY clause this migration replaces', f;
    END IF;
    EXECUTE format('CREATE OR REPLACE FUNCTION cwstore.%I() RETURNS trigger '
                   'LANGUAGE plpgsql AS %L', f, replace(src, old_clause, new_clause));
  END LOOP;
END
$do$;
-- CREATE OR REPLACE resets a function's settings: put back 0001's.
ALTER FUNCTION cwstore._nodes_inserted_bulk() SET work_mem = '64MB';
