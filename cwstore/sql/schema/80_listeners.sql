-- 80_listeners: who follows the channel cwstore, so appends wake followers only while
-- someone follows.
--
-- PostgreSQL queues a notification under one lock for the whole server at commit,
-- whether or not any session listens: with 16 writers on separate graphs an
-- unconditional NOTIFY cost about a quarter of the throughput. Followers (the clients'
-- tail and tail_all) register in cwstore.listeners after they LISTEN, and the nodes
-- triggers notify only while the table holds a row. NOTIFY stays a hint: a follower
-- that registers while a write is in flight may miss that one wake-up and finds the
-- node at its next poll.

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
