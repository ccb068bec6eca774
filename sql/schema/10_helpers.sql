-- 10_helpers: the schema, and the pure helper functions everything else uses (no
-- table access): the open-span sentinel, payload and JSON text helpers, createdAt
-- parsing, the boxes of the span indexes, a node's JSON text, and the raising of a
-- validation error.
--
-- SQLSTATEs raised: CW400 (cwstore._violation; DETAIL is a JSON object with code,
-- graph_id, seq, index, node_id, path, message).

CREATE SCHEMA IF NOT EXISTS cwstore;

-- ---------------------------------------------------------------------------------
-- helpers
-- ---------------------------------------------------------------------------------

-- The open-span sentinel: the to_seq of a frontier span or key version that is still
-- open. Written as this call everywhere, index predicates included: it is folded into
-- the constant when a statement is planned, so partial indexes still match.
CREATE FUNCTION cwstore.infinity_seq() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 9223372036854775807::bigint $$;
COMMENT ON FUNCTION cwstore.infinity_seq() IS
  'The to_seq of a span that is still open (a current head).';

-- How far a graph's frontier history (frontier_spans) may trail its nodes: the write
-- that takes the graph this many nodes past its watermark (graphs.derived_length)
-- derives the spans of those nodes, in one set-wise pass; a read as of a later node
-- folds at most this many minus one.
CREATE FUNCTION cwstore.derive_lag() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 32::bigint $$;
COMMENT ON FUNCTION cwstore.derive_lag() IS
  'How many nodes a graph''s frontier history may trail its length before the write that reaches it derives them.';

-- The width of the blocks of sequences by which kind_counts keeps running counts: per
-- kind, the last node of the kind in each block the watermark has passed, so that a
-- count as of s is a descent of kind_counts_pkey plus at most one block and the
-- watermark's lag of nodes (cwstore._kind_counts_at).
CREATE FUNCTION cwstore.count_block() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 32::bigint $$;
COMMENT ON FUNCTION cwstore.count_block() IS
  'The width of the blocks of sequences kind_counts keeps a running count per kind in (the last node of the kind in each block).';

-- _fold_frontier(frontier, new heads, closed): SPEC 4's fold of a run of nodes onto a
-- frontier (heads' sequences, in order): the heads that a node of the run took as a
-- parent leave it, the run's folding nodes join it at the end in sequence order, unless
-- a later node of the run took them as a parent. new is the run's folding nodes
-- (semantic nodes and parentless system nodes leave the frontier alone), closed the
-- parents of those nodes. Set-wise: a node is only ever a parent of later nodes.
CREATE FUNCTION cwstore._fold_frontier(p_frontier bigint[], p_new bigint[], p_closed bigint[])
RETURNS bigint[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_heads bigint[];
  v_closed bigint;
BEGIN
  -- plpgsql, not SQL: a SQL function with a FROM clause is not inlined, and its body
  -- was planned again in every statement that called it (0.12 ms an append). A run of a
  -- few nodes (an append, a read's fold) takes each closed one out of the heads, in
  -- array operations (no statement); a large one (an import) joins them.
  IF coalesce(cardinality(p_closed), 0)
     * (coalesce(cardinality(p_frontier), 0) + coalesce(cardinality(p_new), 0)) <= 10000 THEN
    v_heads := coalesce(p_frontier || p_new, '{}');
    FOREACH v_closed IN ARRAY coalesce(p_closed, '{}') LOOP
      v_heads := array_remove(v_heads, v_closed);
    END LOOP;
    RETURN v_heads;
  END IF;
  RETURN (SELECT coalesce(array_agg(u.s ORDER BY u.o), '{}')
            FROM unnest(p_frontier || p_new) WITH ORDINALITY AS u(s, o)
            LEFT JOIN (SELECT DISTINCT c.s FROM unnest(p_closed) AS c(s)) c ON c.s = u.s
           WHERE c.s IS NULL);
END $$;
COMMENT ON FUNCTION cwstore._fold_frontier(bigint[], bigint[], bigint[]) IS
  'Private: a frontier (heads'' seqs, in order) after a run of nodes: without closed (the parents of the run''s folding nodes), then new (those nodes), in order.';

-- The ten node kinds of AgentState v1, listed once: the nodes table's CHECK, append_v1's
-- validation and the projection's counts read them from here. A call with no argument
-- to an IMMUTABLE function is folded into a constant when a statement is planned, so
-- this costs nothing per row; a CHECK constraint's is folded each time a statement that
-- writes the table starts, which for a SQL function means planning its body again
-- (about 15 microseconds per append), and for plpgsql reusing a cached plan.
CREATE FUNCTION cwstore.node_kinds() RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN ARRAY['system', 'goal', 'inference', 'answer', 'tool_call', 'tool_result',
               'resource', 'semantic', 'protocol_error', 'verification'];
END $$;
COMMENT ON FUNCTION cwstore.node_kinds() IS
  'The ten node kinds of AgentState v1, in the runtime''s order.';

-- The queryable jsonb copy of a payload. jsonb refuses \u0000, so the escape becomes
-- U+FFFD here; payload_text keeps the exact text. Escaped backslash pairs are set
-- aside first so that a literal "\\u0000" (backslash, then u0000) is left alone. Not
-- STRICT (a NULL text gives NULL all the same): a STRICT SQL function whose body is
-- not is called rather than inlined, and its body planned again on every statement.
CREATE FUNCTION cwstore.payload_jsonb(payload_text text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(payload_text, '\u0000') = 0 THEN payload_text::jsonb
         ELSE replace(replace(replace(payload_text, '\\', E'\x01'), '\u0000', '\ufffd'),
                      E'\x01', '\\')::jsonb END
$$;
COMMENT ON FUNCTION cwstore.payload_jsonb(text) IS
  'jsonb copy of an exact payload text (U+0000 shown as U+FFFD).';

-- PostgreSQL's JSON functions refuse the escape \u0000 when they read a document. To
-- pass such a document through them, _nul_hide rewrites it reversibly: escaped
-- backslashes are doubled and each \u0000 becomes an escaped backslash followed by
-- "u0000"; _nul_show undoes it on any member's text taken out of the hidden document.
CREATE FUNCTION cwstore._nul_hide(doc text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT replace(replace(replace(doc, '\\', E'\x01'), '\u0000', '\\u0000'),
                 E'\x01', '\\\\')
$$;

CREATE FUNCTION cwstore._nul_show(doc text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT replace(replace(replace(doc, '\\\\', E'\x01'), '\\u0000', '\u0000'),
                 E'\x01', '\\')
$$;

-- createdAt is checked to be RFC 3339 with an explicit zone (the row rule
-- nodes_created_at_check of cwstore._node_row_check), so
-- parsing it does not depend on the session's TimeZone or DateStyle: that is what makes
-- IMMUTABLE true. PostgreSQL keeps microseconds; a createdAt with more digits is rounded
-- UP to the next microsecond, so "createdAt <= T" stays exact for any T it can hold.
-- (plpgsql: a non-inlinable SQL function costs more per row in a bulk load.)
CREATE FUNCTION cwstore.parse_time(created_at text) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_local text;
  v_zone text;
  v_t timestamp;
BEGIN
  -- The runtime's own form (Date.prototype.toISOString), read as it is.
  IF created_at ~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$' THEN
    RETURN created_at::timestamptz;
  END IF;
  -- Split the zone off and apply it by hand: RFC 3339 allows offsets up to +-23:59,
  -- PostgreSQL's timestamptz input only up to +-15:59.
  IF right(created_at, 1) IN ('Z', 'z') THEN
    v_local := left(created_at, length(created_at) - 1);
    v_zone := '+00:00';
  ELSIF substr(created_at, length(created_at) - 5, 1) NOT IN ('+', '-')
        OR substr(created_at, length(created_at) - 2, 1) <> ':' THEN
    RETURN NULL;  -- no zone: nodes_created_at_check refuses the row
  ELSE
    v_local := left(created_at, length(created_at) - 6);
    v_zone := right(created_at, 6);
  END IF;
  IF v_local ~ '\.\d{7}' THEN
    v_t := regexp_replace(v_local, '(\.\d{6})\d+', '\1')::timestamp
           + CASE WHEN substring(v_local FROM '\.\d{6}(\d+)') ~ '[1-9]'
                  THEN interval '1 microsecond' ELSE interval '0' END;
  ELSE
    v_t := v_local::timestamp;
  END IF;
  RETURN (v_t - (CASE left(v_zone, 1) WHEN '-' THEN -1 ELSE 1 END)
                * make_interval(hours => substr(v_zone, 2, 2)::int,
                                mins => substr(v_zone, 5, 2)::int)) AT TIME ZONE 'UTC';
END $$;

-- A graph's key, its graph_id: 48 bits of the MD5 of its name (probe 0), or, when that
-- key is held by another name, of the next probe's text (cwstore.graph_key(name, probe),
-- below). Derived from the name so that a name finds its graph's row by its key, which
-- is what lets a distributed PostgreSQL (Citus) spread graphs by this key: its unique
-- constraints must include the distribution column. 48 bits keep the key exact in a
-- float8 with room for the quarter-unit width of cwstore.span_band's boxes. Two names
-- with one probe-0 key both exist: the second takes probe 1 (docs/erasure.md, "Graph
-- names and keys"); cwstore.graph_id_of walks the same chain.
-- Probe n > 0 hashes the probe's number before the name, with a separator no digit is:
-- the texts of two (name, probe) pairs never coincide.
-- Not STRICT (a NULL name or probe gives NULL all the same): PostgreSQL inlines a SQL
-- function only if it is not STRICT or its body is, and a CASE is not; a function not
-- inlined has its body planned again in every statement that calls it.
CREATE FUNCTION cwstore.graph_key(p_name text, p_probe integer DEFAULT 0) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ('x' || left(md5(CASE WHEN p_probe = 0 THEN p_name
                               ELSE p_probe::text || ':' || p_name END), 12))::bit(48)::bigint
$$;
COMMENT ON FUNCTION cwstore.graph_key(text, integer) IS
  'The key of a graph name at a probe of its chain (48 bits of md5; probe 0, the default, is the graph_id of almost every graph): graphs.graph_id = graph_key(name, key_probe).';

-- The longest graph name, in bytes of UTF-8: every door refuses a longer one when it
-- would create the graph (ensure_graph_v1, and so append_v1 and begin_import_v1), and
-- the clients refuse it before sending (cwstore._arg_checks.MAX_GRAPH_NAME_BYTES, the
-- same number, checked by tests/db/test_limits.py). Messages quote at most 200
-- characters of a name.
CREATE FUNCTION cwstore.max_graph_name_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 2000
$$;
COMMENT ON FUNCTION cwstore.max_graph_name_bytes() IS
  'The longest graph name, in bytes of UTF-8 (2000).';

-- The largest payload, in bytes of its JSON text (UTF-8): append_v1 and import_rows_v1
-- refuse a larger one (too_large), as the validator does
-- (cwstore.document.MAX_PAYLOAD_BYTES, the same number, checked by
-- tests/db/test_limits.py), so that no node costs a backend more than a bounded amount
-- of memory (docs/reliability.md).
CREATE FUNCTION cwstore.max_payload_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 4194304
$$;
COMMENT ON FUNCTION cwstore.max_payload_bytes() IS
  'The largest payload, in bytes of its JSON text (4 MiB).';

CREATE FUNCTION cwstore.at_box(graph_id bigint, seq bigint) RETURNS box
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT box(point(graph_id, seq), point(graph_id, seq))
$$;

CREATE FUNCTION cwstore._violation(code text, graph_id bigint, seq bigint, node_id text,
                                   path text, message text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW400', MESSAGE = code || ': ' || message,
    DETAIL = jsonb_build_object('code', code, 'graph_id', graph_id, 'seq', seq,
                                'index', seq - 1, 'node_id', node_id, 'path', path,
                                'message', message)::text;
END $$;


-- A closed frontier span as a box: x spans graph_id +- 0.25, y spans from_seq ..
-- to_seq - 0.5. Why a width: with zero-width boxes every box has zero area, GiST's
-- insertion penalty (area enlargement) is zero everywhere and the tree ends up
-- unordered: finding the heads at s in 200,000 spans read ~390 index pages. With a
-- width, the area grows with the span's length and the tree clusters by sequence: 3-5
-- pages. The index holds closed spans only (partial): a span is written
-- open (to_seq infinite) and closed later by an UPDATE, and an open version's box,
-- even once dead and vacuumed, would leave its parents' boxes stretched to infinity
-- (GiST never shrinks them). Open spans are the current heads, found through
-- frontier_spans_current_idx.
CREATE FUNCTION cwstore.span_band(graph_id bigint, from_seq bigint, to_seq bigint) RETURNS box
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT box(point(graph_id::float8 - 0.25, from_seq), point(graph_id::float8 + 0.25,
                                                            to_seq::float8 - 0.5))
$$;
COMMENT ON FUNCTION cwstore.span_band(bigint, bigint, bigint) IS
  'A validity span [from_seq, to_seq) of one graph as a box half a unit wide, for frontier_spans_closed_idx: span_band(...) @> at_box(graph_id, s) means valid at s.';

-- _json_member_text(doc, member) -> text
--   The exact JSON text of one member of a JSON object given as text (as the runtime
--   wrote it: member order, spacing, escapes), NULL if absent (the last one if repeated,
--   as jsonb reads it). The json type keeps a value's text, so -> on it returns the
--   member's text verbatim; PostgreSQL's json operators refuse the escape \u0000
--   anywhere in the document, so such a document goes through the reversible
--   cwstore._nul_hide first and the member's text through cwstore._nul_show after.
--   Cost: one parse of the document.
CREATE FUNCTION cwstore._json_member_text(p_doc text, p_member text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(p_doc, '\u0000') = 0 THEN (p_doc::json -> p_member)::text
         ELSE cwstore._nul_show((cwstore._nul_hide(p_doc)::json -> p_member)::text)
         END
$$;
COMMENT ON FUNCTION cwstore._json_member_text(text, text) IS
  'Private: exact JSON text of a member of a JSON object text, \u0000 escapes included.';

-- The runtime's JSON object of a stored node, fields in the runtime's order: what export
-- concatenates, built as it reads. Its arguments are a row of cwstore.nodes, whose id,
-- kind, parents and createdAt hold nothing JSON escapes (the row rules nodes_id_check,
-- nodes_kind_check and nodes_created_at_check; parents are ids of nodes), so they are
-- quoted as they are; the resourceKey, any text, goes through to_json. STABLE, as
-- to_json is, so that a query calling it gets its body inlined (a SQL function declared
-- more strictly than its body is called instead, its body planned again each time).
CREATE FUNCTION cwstore.node_json(p_id text, p_kind text, p_parents text[], p_payload text,
                                  p_created_at text, p_seq bigint, p_resource_key text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT '{"id":"' || p_id || '","kind":"' || p_kind || '","parents":'
         || CASE WHEN cardinality(p_parents) = 0 THEN '[]'
                 ELSE '["' || array_to_string(p_parents, '","') || '"]' END
         || ',"payload":' || p_payload || ',"createdAt":"' || p_created_at
         || '","sequence":' || p_seq
         || CASE WHEN p_resource_key IS NULL THEN ''
                 ELSE ',"resourceKey":' || to_json(p_resource_key)::text END
         || '}'
$$;
COMMENT ON FUNCTION cwstore.node_json(text, text, text[], text, text, bigint, text) IS
  'A stored node (a row of cwstore.nodes) as the runtime''s JSON object text (id, kind, parents, payload, createdAt, sequence, resourceKey?), payload verbatim.';
