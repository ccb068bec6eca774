-- 0006_key_index: a key's versions read by one index range scan.
--
-- Why: reading a run of a key's versions with their nodes (a LangGraph checkpoint's
-- message list, 500 messages on the benchmark's session) went through key_versions,
-- then one descent of nodes_pkey per version; the descents were most of the read's
-- server time (docs/langgraph.md).
--
--   * nodes_key_idx: the nodes of each resource key of a graph in sequence order, with
--     their ids (every node of a key is one of its versions, in that order:
--     40_derive.sql).
--
-- The definition below is that of cwstore/sql/schema/20_tables.sql, where it is
-- documented.
--
-- Safe with live writers: yes; appends wait while the index is built (one pass over the
-- nodes that have a resource key). To build it without blocking writers on a large
-- store, create it first with CREATE INDEX CONCURRENTLY under the same name and
-- definition; this migration then finds it and does nothing.

-- 20_tables

CREATE INDEX IF NOT EXISTS nodes_key_idx ON cwstore.nodes (graph_id, resource_key, seq)
  INCLUDE (id) WHERE resource_key IS NOT NULL;
