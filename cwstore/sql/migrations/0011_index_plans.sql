-- 0011_index_plans: the write doors plan with enable_seqscan off.
--
-- Why (issue 35): with the tables analyzed while empty, 150 LangGraph puts made about
-- 2,250 sequential scans of cwstore.nodes. A caller's connection keeps a plpgsql
-- function's plans for its life (append_v1's are generic by design), so a plan made
-- while the tables were small went on scanning them as they grew. Every lookup of
-- these functions has an index; enable_seqscan off makes the plan use it whatever the
-- statistics said (off is a penalty, not a ban). The store's own connections also set
-- it for the session (cwstore.drivers._protocol.INDEX_PLANS); this covers every other
-- caller (psql, the TypeScript runtime).
--
-- Safe with live writers: yes; function settings only, taken by the next call.

-- 60_write_api

ALTER FUNCTION cwstore.ensure_graph_v1(text, text[]) SET enable_seqscan = off;
ALTER FUNCTION cwstore.begin_import_v1(text, text[]) SET enable_seqscan = off;
ALTER FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[])
  SET enable_seqscan = off;
ALTER FUNCTION cwstore.declare_frontier_v1(bigint, text[]) SET enable_seqscan = off;
ALTER FUNCTION cwstore.append_v1(text, json, bigint, json, bigint) SET enable_seqscan = off;

-- 90_erasure

ALTER FUNCTION cwstore.erase_graph_v1(text, text) SET enable_seqscan = off;
