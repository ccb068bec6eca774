-- 0004_cheaper_appends: work every append did that it need not.
--
-- graphs_vocabulary_check and graphs_retention_group_check become a trigger on those
-- columns (refusing as the constraints did: 23514, their names), and graphs_guard's
-- long WHEN condition becomes two triggers: one for a client's UPDATE (WHEN
-- pg_trigger_depth() < 1), one on the columns nobody may change. PostgreSQL prepares a
-- table's CHECK expressions and its triggers' WHEN conditions again in every statement
-- that updates a row, and every append updates its graph's row; triggers on columns are
-- passed over without that when a statement sets none of them.
--
-- _payload_problem reads the text outside a payload's strings by cutting it at its
-- quotes instead of a regular expression that replaced each string: the expression
-- starts again at every string, several times the cost for a payload of many strings
-- (a LangGraph checkpoint's).
--
-- A plpgsql condition or assignment that holds a subquery is run as a statement, its
-- plan made ready on every call however the condition ends; the door's functions run
-- such subqueries only when their answer is needed (_payload_problem's depth walk,
-- _lock_for_append's check of a stale length, the nodes trigger's check of a declared
-- frontier's repeated heads), and _fold_frontier folds a short run in array operations.
--
-- An append that declares the frontier its own nodes' fold gives already (a LangGraph
-- put names its checkpoint) records no declaration: _declare_after_append compares it
-- with the graph's row, where the nodes trigger has just put the fold. append_v1 looks
-- for an id given twice by a statement only in a batch of more than three nodes.
--
-- append_v1 runs fewer statements: _batch_fields is a SQL function of one SELECT that
-- PostgreSQL inlines into the statement that reads it (append_v1 raises its problem),
-- _frontier_heads reads a declared frontier in one statement, append_v1 returns the rows
-- of a batch it wrote whole without a query, and the nodes trigger reads a statement of
-- one node by a scan of its transition table (an aggregate sums up a larger one) and
-- derives it without the arrays a statement of several nodes needs, unless it is
-- semantic; _derive_node resolves a single parent by an index lookup of its own.
--
-- The payload checks count a text's brackets and commas in bytes (_occurrences, which
-- _brackets_opened and _json_values call), not with length() and translate(), which
-- read a text a character at a time.
--
-- key_versions keeps a key's closed versions only: its current version, still open,
-- is its row of key_heads, which every append of the key reads and moves anyway. A
-- version enters key_versions when the key moves on, closed then (one row written
-- where there were two, and the row of a key's only version not at all); the readers
-- of every version (key_history, the viewer's and the LangGraph saver's) take the
-- head from key_heads. The open rows stored so far are deleted.
--
-- The tables an append writes lose their CHECK constraints, which PostgreSQL prepares
-- again from their text in every statement that writes a row: a node row's rules are
-- checked by the nodes trigger (_node_row_check), which refuses as the constraints did
-- (23514, their names); the rows derived from nodes are written by that trigger only.
--
-- The truth about the schema is sql/schema/; the definitions below are copies of it,
-- and tests/migration proves a database migrated here equal to one made from schema/.
--
-- Safe with live writers: yes. Each statement is one short catalog change (the rows
-- already stored passed the constraints, so none is checked again), but for the open
-- rows of key_versions, deleted while appends wait (nodes locked against writes).

SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

ALTER TABLE cwstore.graphs DROP CONSTRAINT graphs_vocabulary_check,
  DROP CONSTRAINT graphs_retention_group_check;

-- _graphs_settings (BEFORE INSERT, or UPDATE of vocabulary or retention_group, on
-- graphs): a vocabulary is NULL (dynamic) or 1 to 32 names, none NULL; a retention
-- group is NULL or 1 to 2000 bytes of UTF-8. Refused as the check constraints
-- graphs_vocabulary_check and graphs_retention_group_check would be (23514, those
-- names). Triggers on those columns, not CHECKs, for the reason _graphs_key gives: an
-- append updates its graph's row, and PostgreSQL prepares every CHECK of the table
-- again for each statement that does.
CREATE FUNCTION cwstore._graphs_settings() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  v_check text;
  v_detail text;
BEGIN
  IF NOT (NEW.vocabulary IS NULL OR (cardinality(NEW.vocabulary) BETWEEN 1 AND 32
                                     AND array_position(NEW.vocabulary, NULL) IS NULL)) THEN
    v_check := 'graphs_vocabulary_check';
    v_detail := format('a vocabulary is NULL or 1 to 32 names, none NULL (this one has %s)',
                       cardinality(NEW.vocabulary));
  ELSIF NEW.retention_group = '' OR octet_length(NEW.retention_group) > 2000 THEN
    v_check := 'graphs_retention_group_check';
    v_detail := format('a retention group is 1 to 2000 bytes of UTF-8 (this one has %s)',
                       octet_length(NEW.retention_group));
  ELSE
    RETURN NEW;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = v_check,
    SCHEMA = 'cwstore', TABLE = 'graphs',
    MESSAGE = format('new row for relation "graphs" violates check constraint "%s"', v_check),
    DETAIL = v_detail;
END $$;

CREATE TRIGGER graphs_settings_check BEFORE INSERT OR UPDATE OF vocabulary, retention_group
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_settings();

DROP TRIGGER graphs_guard ON cwstore.graphs;
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard_identity BEFORE UPDATE OF graph_id, incarnation, name, vocabulary
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_guard();

-- _occurrences(text, piece) -> how many times a text holds a piece, counted in bytes
-- (octet_length, replace): a one-byte character is never part of another's UTF-8, and
-- length() and translate() read a text a character at a time, several times slower
-- (translate about 180 instructions a character). A SQL expression that PostgreSQL
-- inlines where it is called.
CREATE FUNCTION cwstore._occurrences(p_text text, p_piece text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT (octet_length(p_text) - octet_length(replace(p_text, p_piece, '')))
         / octet_length(p_piece)
$$;

-- _brackets_opened(text) -> how many '{' and '[' a text holds (outside its strings, for
-- a text with every string written ""), as _occurrences counts, both at once: every
-- payload's check counts them, and each more node in an expression costs every
-- transaction that runs it (plpgsql prepares its expressions again in each).
CREATE FUNCTION cwstore._brackets_opened(p_text text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT octet_length(p_text) - octet_length(replace(replace(p_text, '{', ''), '[', ''))
$$;

-- _json_values(bare) -> how many values a JSON text holds, its root included, given
-- with every string written "": every value but the root follows a comma or opens a
-- container that is not empty, so 1 + commas + containers - empty containers (counted
-- apart: '[{}]' holds one empty container, not two).
CREATE OR REPLACE FUNCTION cwstore._json_values(p_bare text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 1 + cwstore._occurrences(p_bare, ',') + cwstore._brackets_opened(p_bare)
         - cwstore._occurrences(p_bare, '{}') - cwstore._occurrences(p_bare, '[]')
$$;

CREATE OR REPLACE FUNCTION cwstore._members_unique_small(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_doc jsonb := cwstore.payload_jsonb(p_text);
BEGIN
  IF cwstore._brackets_opened(p_bare) > 1000 THEN
    RETURN cwstore._json_values(p_bare)
           = cwstore._json_values(regexp_replace(v_doc::text, '"(\\.|[^"\\])*"', '""', 'g'));
  END IF;
  RETURN cwstore._json_values(p_bare)
         = jsonb_array_length(jsonb_path_query_array(v_doc, 'strict $.**.type()'));
END $$;

-- _payload_problem(payload text) -> 'code|path|message', or NULL when the payload is
-- JSON the runtime can write and cwstore can keep exactly. The text must already be
-- one JSON value (append_v1 reads it out of a json batch; import_rows_v1 parses its
-- slice first). Checks, in order:
--   * spelling: exactly as JSON.stringify writes the value (no whitespace outside
--     strings, no escape it would not write, numbers as Number::toString writes them),
--     since the text is stored and given back byte for byte (code shape);
--   * numbers: finite, integers within +-(2^53-1) unless JavaScript writes them back
--     digit for digit (unrepresentable);
--   * nesting at most 10,000 levels (cwstore._jsontext.MAX_DEPTH; unrepresentable);
--   * no object repeats a member name (shape; JSON.parse keeps only the last).
CREATE OR REPLACE FUNCTION cwstore._payload_problem(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_rest text;
  v_bare text;
  v_tok text;
  v_js text;
  v_deep boolean;
BEGIN
  -- Escapes: take out those JSON.stringify writes (escaped backslashes first, pair by
  -- pair from the left, so each backslash left starts an escape); none may remain.
  v_rest := replace(p_text, '\\', '');
  IF strpos(v_rest, '\') > 0 THEN
    v_rest := replace(replace(replace(replace(replace(replace(v_rest, '\"', ''), '\n', ''),
                                                      '\t', ''), '\r', ''), '\b', ''), '\f', '');
    IF strpos(v_rest, '\') > 0 THEN
      v_rest := regexp_replace(v_rest, '\\u00(0[0-7bef]|1[0-9a-f])', '', 'g');
      IF strpos(v_rest, '\') > 0 THEN
        IF cwstore._lone_surrogate(p_text) THEN
          RETURN 'unrepresentable|$.payload|a string holds a lone surrogate (not valid Unicode)';
        END IF;
        RETURN format('shape|$.payload|the escape %s is not how JSON.stringify writes that character',
                      substring(v_rest FROM '\\(?:u[0-9a-fA-F]{4}|.)'));
      END IF;
    END IF;
  END IF;
  -- What is left outside strings: punctuation, literals and numbers, nothing else: the
  -- text cut at its quotes, its odd parts joined by "" (a regular expression replacing
  -- each string starts again at every string, several times the cost for a payload of
  -- many). Over 64 kB, each check reads the text in parts (_json_bare,
  -- _bare_number_problem, _too_deep): a regular expression over the whole text takes 4
  -- bytes a character.
  IF octet_length(v_rest) <= 65536 THEN
    v_bare := array_to_string(ARRAY(SELECT x.t FROM string_to_table(v_rest, '"') WITH ORDINALITY AS x(t, o)
                                     WHERE x.o % 2 = 1), '""');
  ELSE
    v_bare := cwstore._json_bare(v_rest);
  END IF;
  IF strpos(v_bare, ' ') > 0 OR strpos(v_bare, E'\n') > 0 OR strpos(v_bare, E'\t') > 0
     OR strpos(v_bare, E'\r') > 0 THEN
    RETURN 'shape|$.payload|whitespace outside strings: send the payload as JSON.stringify writes it (compact)';
  END IF;
  IF octet_length(v_bare) <= 65536 THEN
    IF v_bare ~ '[0-9][.eE]|[0-9]{16}|-0' THEN
      SELECT m[1] INTO v_tok
        FROM regexp_matches(v_bare, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
       WHERE m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
       LIMIT 1;
    END IF;
  ELSE
    v_tok := cwstore._bare_number_problem(v_bare);
  END IF;
  IF v_tok IS NOT NULL THEN
    v_js := cwstore.js_number(v_tok);
    IF v_js IS NULL AND v_tok ~ '^-?[0-9.]+[eE]\+?[0-9]+$' THEN
      RETURN format('unrepresentable|$.payload|%s is not a finite number', v_tok);
    ELSIF v_tok ~ '^-?[0-9]+$' AND v_tok <> '-0' THEN
      RETURN format('unrepresentable|$.payload|integer %s is beyond +-(2^53-1): JavaScript cannot hold it exactly',
                    v_tok);
    END IF;
    RETURN format('shape|$.payload|the number %s is written %s by JSON.stringify', v_tok,
                  coalesce(v_js, 'as 0'));
  END IF;
  -- Nesting depth: the deepest point of the running count of brackets outside strings,
  -- walked only when there are more opening brackets than the limit. (A condition
  -- holding a subquery is a statement of its own, made ready on every call, however
  -- the condition ends: hence the IFs around the queries here and in the door's other
  -- functions.)
  IF octet_length(v_bare) > 65536 THEN
    v_deep := cwstore._too_deep(v_bare, 10000);
  ELSIF cwstore._brackets_opened(v_bare) > 10000 THEN
    v_deep := (SELECT max(d) FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1 ELSE -1 END)
                                            OVER (ORDER BY o) AS d
                                     FROM string_to_table(regexp_replace(v_bare, '[^][{}]', '', 'g'),
                                                          NULL) WITH ORDINALITY AS t(c, o)) x) > 10000;
  END IF;
  IF v_deep THEN
    RETURN 'unrepresentable|$.payload|nesting deeper than 10000 levels';
  END IF;
  -- Repeated member names (after the depth, which bounds the stack their check takes):
  -- jsonb keeps one member per name, so it holds fewer values than the text when a name
  -- repeats. Values in the text: containers, strings that are not member names, numbers
  -- and literals.
  IF strpos(v_bare, '"":') > 0
     AND strpos(substr(v_bare, strpos(v_bare, '"":') + 3), '"":') > 0
     AND NOT cwstore._members_unique(p_text, v_bare) THEN
    RETURN 'shape|$.payload|an object repeats a member name (JSON.parse would keep only the last)';
  END IF;
  RETURN NULL;
END $$;

-- _fold_frontier(frontier, new heads, closed): SPEC 4's fold of a run of nodes onto a
-- frontier (heads' sequences, in order): the heads that a node of the run took as a
-- parent leave it, the run's folding nodes join it at the end in sequence order, unless
-- a later node of the run took them as a parent. new is the run's folding nodes
-- (semantic nodes and parentless system nodes leave the frontier alone), closed the
-- parents of those nodes. Set-wise: a node is only ever a parent of later nodes.
CREATE OR REPLACE FUNCTION cwstore._fold_frontier(p_frontier bigint[], p_new bigint[], p_closed bigint[])
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

-- _lock_for_append(graph, graph_id, incarnation, expected_length, ids): that life of
-- the graph locked (until commit, cwstore._lock_life) and its length. CW409 for a stale
-- expected length, unless every node of the batch (ids) is held already (a retry of a
-- write that committed: not a conflict).
CREATE OR REPLACE FUNCTION cwstore._lock_for_append(p_graph text, p_graph_id bigint, p_incarnation bigint,
                                         p_expected bigint, p_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint := cwstore._lock_life(p_graph, p_graph_id, p_incarnation);
BEGIN
  IF p_expected IS NULL OR p_expected = v_len THEN
    RETURN v_len;
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_ids) AS u(id)
              WHERE NOT EXISTS (SELECT 1 FROM cwstore.nodes n
                                 WHERE n.graph_id = p_graph_id AND n.id = u.id)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200), v_len,
                       p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', v_len)::text;
  END IF;
  RETURN v_len;
END $$;

-- _declare_after_append(graph_id, length, written, heads, ids, expected_length): the
-- declared frontier recorded after an append's new nodes. Not recorded when the fold of
-- the batch's nodes (SPEC 4) made it the frontier already, heads in the same order
-- (every node of the batch new, node o of it node length + o): a declaration there
-- changes no frontier at any sequence, and a writer that names the node it appends
-- last as the frontier (a LangGraph put) costs no more than one that leaves it to the
-- fold. When the call wrote nothing it is recorded only if it changes the frontier
-- and, with an expected_length, that is current, or, without one, no node came after
-- the batch's last: a retry after others moved on must not move their frontier back.
CREATE OR REPLACE FUNCTION cwstore._declare_after_append(p_graph_id bigint, p_len bigint, p_new bigint,
                                              p_heads text[], p_ids text[], p_expected bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_last bigint;
  v_frontier bigint[];
BEGIN
  IF p_new = cardinality(p_ids) THEN
    SELECT g.frontier_seqs INTO v_frontier FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
    IF cardinality(v_frontier) = cardinality(p_heads) THEN
      FOR i IN 1 .. cardinality(p_heads) LOOP
        -- A head the batch did not write (at or below length) is not the batch's.
        IF NOT (CASE WHEN v_frontier[i] > p_len
                     THEN coalesce(p_ids[v_frontier[i] - p_len] = p_heads[i], false)
                     ELSE false END) THEN
          v_frontier := NULL;
          EXIT;
        END IF;
      END LOOP;
      IF v_frontier IS NOT NULL THEN
        RETURN;
      END IF;
    END IF;
  END IF;
  IF p_new = 0 THEN
    SELECT max(n.seq) INTO v_last
      FROM unnest(p_ids) AS u(id)
      JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.id = u.id LIMIT 1) n ON true;
    IF coalesce(p_expected, v_last, p_len) <> p_len
       OR p_heads IS NOT DISTINCT FROM (
            SELECT coalesce(array_agg(n.id ORDER BY u.o), '{}')
              FROM cwstore.graphs g
             CROSS JOIN LATERAL unnest(g.frontier_seqs) WITH ORDINALITY AS u(s, o)
              JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                             WHERE n.graph_id = p_graph_id AND n.seq >= u.s AND n.seq <= u.s
                             ORDER BY n.seq LIMIT 1) n ON true
             WHERE g.graph_id = p_graph_id) THEN
      RETURN;
    END IF;
  END IF;
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, p_len + p_new, p_heads);
END $$;

COMMENT ON TABLE cwstore.frontier_declarations IS
  'Frontiers declared by writers (an imported document''s, or one given with an append unless the fold of its own nodes gave that frontier already), exactly as given, at the graph length when declared (the last at a length is the frontier there). One declared past the graph''s derived_length enters frontier_spans when that run is derived.';

DROP FUNCTION cwstore._batch_fields(json);
-- _batch_fields(nodes, hidden): append_v1's batch (a JSON array), each node's fields as
-- arrays in the batch's order (parents as JSON array texts; payloads byte for byte, a
-- \u0000 in them kept: hidden says the batch's \u0000 escapes were hidden by
-- cwstore._nul_hide, which PostgreSQL's JSON functions refuse), and the first node with
-- a problem, if any: its position (bad, from 1), the problem ('code|path|message') and
-- its id when that is a string. Every node is checked for its JSON types, for what the
-- table's constraints would refuse and for _node_problem; append_v1 raises the problem
-- (CW400, with the safeguard code, the node's position and the path). Each node's
-- members are read once (json_each): PostgreSQL's JSON functions keep an allocation for
-- every name and scalar they read until the row is done, so each more reading of a 4
-- MiB payload of small values would cost tens of MB. The rows come in the array's
-- order, aggregated without a sort (a sort would hold every payload again). A SQL
-- function of one SELECT, set-returning, so that PostgreSQL inlines it into the
-- statement that reads it: a call of a function of its own costs more than its checks
-- of a small node.
CREATE FUNCTION cwstore._batch_fields(p_nodes json, p_hidden boolean)
RETURNS TABLE (b_ids text[], b_kinds text[], b_parents text[], b_payloads text[],
               b_created text[], b_keys text[], bad bigint, problem text, bad_id text)
LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(f.id #>> '{}'), '{}'), array_agg(f.kind #>> '{}'),
         array_agg(f.parents::text), array_agg(f.payload), array_agg(f."createdAt" #>> '{}'),
         array_agg(f."resourceKey" #>> '{}'),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    FROM (SELECT c.*,
                 coalesce(c.problem0,
                          cwstore._node_problem(c.kind #>> '{}', c.payload, c."createdAt" #>> '{}',
                                                c."resourceKey" #>> '{}')) AS problem
            FROM (SELECT a.o, r.id, r.kind, r.parents, r."createdAt", r."resourceKey",
                         CASE WHEN p_hidden THEN cwstore._nul_show(r.payload)
                              ELSE r.payload END AS payload,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|$|node must be a JSON object'
                   WHEN r.fields <> r.names
                     THEN 'shape|$|node repeats a member name (JSON.parse would keep only the last)'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|$.id|id must be a string'
                   WHEN NOT r.has_kind
                     THEN 'shape|$|node is missing field kind'
                   WHEN json_typeof(r.kind) IS DISTINCT FROM 'string'
                     THEN 'kind|$.kind|kind must be one of the ten kinds (a string)'
                   WHEN json_typeof(r.parents) IS DISTINCT FROM 'array'
                     THEN 'shape|$.parents|parents must be an array'
                   WHEN r.payload IS NULL THEN 'shape|$|payload is missing'
                   WHEN json_typeof(r."createdAt") IS DISTINCT FROM 'string'
                     THEN 'shape|$.createdAt|createdAt must be a string'
                   WHEN r."resourceKey" IS NOT NULL AND json_typeof(r."resourceKey") <> 'string'
                     THEN 'shape|$.resourceKey|resourceKey must be a string when present'
                   WHEN r.unknown
                     THEN 'shape|$|unknown node field'
                   WHEN EXISTS (SELECT 1 FROM json_array_elements(r.parents) pe
                                 WHERE json_typeof(pe) <> 'string')
                     THEN 'shape|$.parents|parents must be string ids'
                   WHEN p_hidden AND strpos(r.id::text || r.kind::text || r."createdAt"::text
                                            || coalesce(r."resourceKey"::text, '')
                                            || r.parents::text, '\\u0000') > 0
                     THEN 'unrepresentable|$|U+0000 outside a payload cannot be stored'
                   WHEN NOT ((r.kind #>> '{}') = ANY (cwstore.node_kinds()))
                     THEN 'kind|$.kind|kind is not one of the ten'
                   WHEN NOT (length(r.id #>> '{}') = 27
                             AND rtrim(r.id #>> '{}', '0123456789abcdef') = 'cw_')
                     THEN 'identity|$.id|id must be cw_ and 24 lowercase hex digits'
                   WHEN (r."resourceKey" #>> '{}') = ''
                     THEN 'shape|$.resourceKey|resourceKey must not be empty'
                 END AS problem0
            FROM json_array_elements(p_nodes) WITH ORDINALITY AS a(e, o)
            CROSS JOIN LATERAL (
                   SELECT count(*) AS fields, count(DISTINCT m.k) AS names,
                          coalesce(bool_or(m.k = 'kind'), false) AS has_kind,
                          coalesce(bool_or(m.k NOT IN ('id', 'kind', 'parents', 'payload',
                                                       'createdAt', 'sequence', 'resourceKey')),
                                   false) AS unknown,
                          min(m.v::text) FILTER (WHERE m.k = 'id' AND json_typeof(m.v) <> 'null')::json AS id,
                          min(m.v::text) FILTER (WHERE m.k = 'kind' AND json_typeof(m.v) <> 'null')::json AS kind,
                          min(m.v::text) FILTER (WHERE m.k = 'parents' AND json_typeof(m.v) <> 'null')::json AS parents,
                          min(m.v::text) FILTER (WHERE m.k = 'payload' AND json_typeof(m.v) <> 'null') AS payload,
                          min(m.v::text) FILTER (WHERE m.k = 'createdAt' AND json_typeof(m.v) <> 'null')::json AS "createdAt",
                          min(m.v::text) FILTER (WHERE m.k = 'resourceKey' AND json_typeof(m.v) <> 'null')::json AS "resourceKey"
                     FROM json_each(CASE json_typeof(a.e) WHEN 'object' THEN a.e ELSE '{}' END)
                          AS m(k, v)) r) c
          OFFSET 0) f
$$;

-- _frontier_heads(frontier): a declared frontier (a JSON array of node ids) as text[];
-- NULL for NULL; CW400 at $.frontier for anything else.
CREATE OR REPLACE FUNCTION cwstore._frontier_heads(p_frontier json) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
  v_heads text[];
  v_ids boolean;
BEGIN
  IF p_frontier IS NULL THEN
    RETURN NULL;
  END IF;
  IF cwstore._lone_surrogate(p_frontier::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$.frontier',
      'a frontier id holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  IF json_typeof(p_frontier) = 'array' THEN
    SELECT coalesce(array_agg(f #>> '{}'), '{}'), coalesce(bool_and(json_typeof(f) = 'string'), true)
      INTO v_heads, v_ids
      FROM json_array_elements(p_frontier) AS f;
  END IF;
  IF NOT coalesce(v_ids, false) THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.frontier',
                               'frontier must be a JSON array of node ids');
  END IF;
  RETURN v_heads;
END $$;

-- append_v1(graph, nodes, expected_length, frontier, incarnation)
--   nodes: a JSON array of runtime nodes {id, kind, parents, payload, createdAt,
--   resourceKey?} (sequence is assigned here; one given is ignored). Each payload is
--   stored byte for byte, so it must be written as JSON.stringify writes it (compact;
--   the runtime's and cwstore's clients' own form); the same checks as cwstore import
--   apply to every node (createdAt, numbers, member names, semantic content and key
--   forms, resourceKey length), each refused with CW400, its code, index and path.
--   expected_length: NULL, or the length the writer last saw (CW409 when stale).
--   frontier: NULL (the fold applies) or a JSON array of ids, the frontier after
--   the batch.
--   incarnation: NULL, or the life of the graph the writer means (graphs.incarnation,
--   returned by every append): CW404 (erased) when the graph's life is another one, or
--   the graph does not exist (it is not created then).
--   The graph's tenant is checked on the row read first, and the row locked is that
--   same life's: a graph erased and made again meanwhile (by any tenant) is never
--   written by this call; it gets CW404 (erased) instead.
--   Nodes whose id the graph already holds, with the same content, are returned as
--   stored and not written (idempotent retries); an id given again with other content,
--   in the graph or earlier in the batch, is refused (duplicate_id). When a call writes
--   nothing, its frontier is declared only if expected_length is current, or, with no
--   expected_length, if no node was appended after the batch's own: a retry after
--   others moved on never moves their frontier back.
--   Locks: the graph row (FOR UPDATE) until commit; nothing else.
--   Returns each node's sequence, id, createdAt and recorded_at, whether this call wrote
--   it, the stored payload of a node it did not write, and the graph's life.
--   Raises: CW400 (shape, kind, parents, semantic...), CW404 (erased), CW409, CW410
--   (chain race), 42501 (another tenant's graph).
-- Its statements take arrays and ids as parameters; custom plans would be re-made on
-- every call, and the generic ones are right for every batch size that takes this path.
CREATE OR REPLACE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL,
                                  p_incarnation bigint DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text, incarnation bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_heads text[];
  v_life record;
  v_ids text[];
  v_kinds text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_keys text[];
  v_hidden boolean;
  v_bad bigint;
  v_problem text;
  v_bad_id text;
  v_now timestamptz := now();
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
    v_heads := cwstore._frontier_heads(p_frontier);
  END IF;

  -- The graph's row is read first, without a lock: the tenant check comes before
  -- anything else (a refused caller learns nothing of the graph, and must not hold
  -- another tenant's counter row while it sits in its aborted transaction). The life
  -- read here is the one locked below, or none: a graph found here but gone once locked
  -- was erased meanwhile, and the call must not write whatever holds its key by then.
  v_life := cwstore._writer_life(p_graph, false, NULL);
  IF p_incarnation IS NOT NULL AND v_life.life_incarnation IS DISTINCT FROM p_incarnation THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  v_graph_id := v_life.life_id;
  v_len := v_life.life_length;
  -- A stale expected length is refused before the batch is read: within a graph's life
  -- its length only grows, so a length seen here that differs from the expected one
  -- differs under the lock too (or the graph is gone by then: CW404). Unless every node
  -- of the batch is held already (a retry of a write that committed: not a conflict).
  IF p_expected_length IS NOT NULL AND p_expected_length <> coalesce(v_len, 0) THEN
    PERFORM cwstore._refuse_stale(p_graph, v_graph_id, p_nodes, p_expected_length,
                                  coalesce(v_len, 0));
  END IF;

  -- The batch's nodes, checked: a \u0000 hidden first (reversibly), as PostgreSQL's JSON
  -- functions refuse it; the first node with a problem refused (CW400, its position).
  IF cwstore._lone_surrogate(p_nodes::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$',
      'a string holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  v_hidden := strpos(p_nodes::text, '\u0000') > 0;
  IF v_hidden THEN
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;
  SELECT f.b_ids, f.b_kinds, f.b_parents, f.b_payloads, f.b_created, f.b_keys, f.bad, f.problem,
         f.bad_id
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys, v_bad, v_problem, v_bad_id
    FROM cwstore._batch_fields(p_nodes, v_hidden) f;
  IF v_bad IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_bad, v_bad_id, v_bad - 1);
  END IF;
  -- An id given twice is looked for by a statement only in a batch of more than three:
  -- in two or three, comparing them is cheaper than the statement's start.
  IF cardinality(v_ids) > 3 THEN
    PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
  ELSIF cardinality(v_ids) > 1 THEN
    IF v_ids[1] = v_ids[2] OR v_ids[1] = v_ids[3] OR v_ids[2] = v_ids[3] THEN
      PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
    END IF;
  END IF;
  IF v_graph_id IS NULL THEN
    v_life := cwstore._writer_life(p_graph, true, NULL);
    v_graph_id := v_life.life_id;
  END IF;
  v_len := cwstore._lock_for_append(p_graph, v_graph_id, v_life.life_incarnation,
                                    p_expected_length, v_ids);

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's (read as the last at or
  -- before the length, in nodes_pkey's order: only that index gives the order, so a
  -- plan made while the table was tiny cannot take another one and read the graph).
  -- The rows come joined to the graph's counter row: on Citus that makes the statement
  -- one INSERT ... SELECT on the graph's worker (not rows copied through the
  -- coordinator, which loses the SQLSTATE of the triggers' refusals).
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                             created_at_text, resource_key, recorded_at, xid)
  SELECT g.graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o], v_now,
         greatest(pg_current_xact_id()::text::bigint,
                  (SELECT l.xid FROM cwstore.nodes l
                    WHERE l.graph_id = v_graph_id AND l.seq <= v_len
                    ORDER BY l.seq DESC LIMIT 1))
    FROM cwstore.graphs g
   CROSS JOIN (SELECT DISTINCT ON (u.id) u.id, u.o
                 FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
                ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE g.graph_id = v_graph_id AND x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;
  -- Only when the insert skipped some (raising undoes the insert).
  IF v_new < cardinality(v_ids) THEN
    PERFORM cwstore._refuse_changed(v_graph_id, v_len, v_ids, v_kinds, v_parents, v_payloads,
                                    v_keys);
  END IF;
  IF v_heads IS NOT NULL THEN
    PERFORM cwstore._declare_after_append(v_graph_id, v_len, v_new, v_heads, v_ids,
                                          p_expected_length);
  END IF;

  -- Every node new and given once: the rows are what was just written, in order.
  -- (Row by row, not RETURN QUERY: no statement to start for what is known already.)
  IF v_new = cardinality(v_ids) THEN
    written := true;
    recorded_at := v_now;
    incarnation := v_life.life_incarnation;
    FOR i IN 1 .. v_new LOOP
      seq := v_len + i;
      id := v_ids[i];
      created_at := v_created[i];
      RETURN NEXT;
    END LOOP;
    RETURN;
  END IF;
  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END, v_life.life_incarnation
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

-- Appends wait from here to the commit: one that had begun moving a key's chain by the
-- old functions finishes first (its open row is deleted below), any later one moves
-- it by the new functions.
LOCK TABLE cwstore.nodes IN SHARE MODE;
ALTER TABLE cwstore.key_versions ALTER COLUMN to_seq DROP DEFAULT;
ALTER TABLE cwstore.key_versions DISABLE TRIGGER key_versions_derived;
DELETE FROM cwstore.key_versions v WHERE v.to_seq = cwstore.infinity_seq();
ALTER TABLE cwstore.key_versions ENABLE TRIGGER key_versions_derived;
COMMENT ON TABLE cwstore.key_versions IS
  'Every closed version of every resource key (semantic keys included): version counts from 1 along the chain; the version was the head for node_seq <= s < to_seq. A key''s current version, still open, is its row of key_heads (head_seq, version).';

-- _derive_chains(graph_id, keys, seqs, ids, parents): a batch's keyed nodes (in sequence
-- order; parents as text[] literals) moved onto their resource chains. The first new
-- version of a key must link to the key's head, each later one in the batch to the one
-- before it; a node that does not is a lost race (CW410), whoever wrote it. The versions
-- the batch closes enter key_versions, each key's last becomes its head (key_heads).
CREATE OR REPLACE FUNCTION cwstore._derive_chains(p_graph_id bigint, k_key text[], k_seq bigint[],
                                       k_id text[], k_parents text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_key text[];
  v_seq bigint[];
  v_id text[];
  v_version bigint[];
  v_next bigint[];
  v_first bigint[];
  v_rn bigint[];
  v_base bigint[];
BEGIN
  WITH k AS (
    SELECT k.*, h.version AS base_version, h.head_seq,
           CASE WHEN k.rn = 1 THEN h.head_id ELSE k.prev_id END AS expected
      FROM (SELECT u.key, u.seq, u.id, u.parents::text[] AS parents,
                   row_number() OVER w AS rn, lag(u.id) OVER w AS prev_id,
                   lead(u.seq) OVER w AS next_seq, first_value(u.seq) OVER w AS batch_first
              FROM unnest(k_key, k_seq, k_id, k_parents) AS u(key, seq, id, parents)
            WINDOW w AS (PARTITION BY u.key ORDER BY u.seq)) k
      LEFT JOIN LATERAL (SELECT h.version, h.head_seq, h.head_id FROM cwstore.key_heads h
                          WHERE h.graph_id = p_graph_id AND h.key = k.key LIMIT 1) h ON true
  )
  SELECT array_agg(k.key), array_agg(k.seq), array_agg(k.id),
         array_agg(CASE WHEN k.expected IS NULL OR k.expected = ANY (k.parents)
                        THEN coalesce(k.base_version, 0) + k.rn
                        ELSE cwstore._chain_conflict(p_graph_id, k.key, k.seq, k.id,
                                                     k.expected, k.parents)
                   END),
         array_agg(k.next_seq), array_agg(k.batch_first), array_agg(k.rn),
         array_agg(k.head_seq)
    INTO v_key, v_seq, v_id, v_version, v_next, v_first, v_rn, v_base
    FROM k;
  -- The versions this batch closes: each key's head before it (closed at its first
  -- new version), and every new version but the key's last (closed at the next).
  INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
  SELECT p_graph_id, u.key, u.version - 1, u.head_seq, u.seq
    FROM unnest(v_key, v_version, v_seq, v_rn, v_base) AS u(key, version, seq, rn, head_seq)
   WHERE u.rn = 1 AND u.head_seq IS NOT NULL
  UNION ALL
  SELECT p_graph_id, u.key, u.version, u.seq, u.next_seq
    FROM unnest(v_key, v_version, v_seq, v_next) AS u(key, version, seq, next_seq)
   WHERE u.next_seq IS NOT NULL;
  INSERT INTO cwstore.key_heads AS h (graph_id, key, head_seq, head_id, version, first_seq)
  SELECT p_graph_id, u.key, u.seq, u.id, u.version, u.batch_first
    FROM unnest(v_key, v_seq, v_id, v_version, v_next, v_first)
           AS u(key, seq, id, version, next_seq, batch_first)
   WHERE u.next_seq IS NULL
  ON CONFLICT (graph_id, key) DO UPDATE
    SET head_seq = excluded.head_seq, head_id = excluded.head_id,
        version = excluded.version;
END $$;

-- key_history(graph, key) -> (version, seq, id, kind, created_at, recorded_at, payload,
--                             payload_text)
--   Every version of a resource key (semantic keys as "semantic:<type>:<key>"), oldest
--   first: version from 1, the node, its runtime createdAt, when the database stored it,
--   and its payload (jsonb, and the exact text). Empty for a key the graph never had.
--   Cost: O(v log n) for the v versions (the closed ones by key_versions_seq_idx, the
--   head by key_heads_pkey, then nodes_pkey).
CREATE OR REPLACE FUNCTION cwstore.key_history(p_graph text, p_key text)
RETURNS TABLE (version integer, seq bigint, id text, kind text, created_at timestamptz,
               recorded_at timestamptz, payload jsonb, payload_text text)
LANGUAGE plpgsql STABLE ROWS 10 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  RETURN QUERY
  SELECT v.version, v.node_seq, n.id, n.kind, n.created_at, n.recorded_at,
         cwstore.payload_jsonb(n.payload_text),
         n.payload_text
    FROM (SELECT v.version, v.node_seq FROM cwstore.key_versions v
           WHERE v.graph_id = g.graph_id AND v.key = p_key
          UNION ALL
          SELECT h.version, h.head_seq FROM cwstore.key_heads h
           WHERE h.graph_id = g.graph_id AND h.key = p_key) v
    JOIN LATERAL (SELECT n.id, n.kind, n.created_at, n.recorded_at, n.payload_text
                    FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = v.node_seq LIMIT 1) n ON true
   ORDER BY v.version;
END $$;

-- A node of one parent (most are) is derived without the statement that resolves a list
-- of parents (its window function, function scan and aggregate).
CREATE OR REPLACE FUNCTION cwstore._derive_node(p_graph_id bigint, p_seq bigint, p_id text,
                                     p_parents text[], p_key text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
  v_parent_seqs bigint[];
  v_head record;
  v_pid text;
  v_parent bigint;
BEGIN
  IF cardinality(p_parents) = 1 THEN
    v_pid := p_parents[1];
    SELECT m.seq INTO v_parent FROM cwstore.nodes m
     WHERE m.graph_id = p_graph_id AND m.id = v_pid LIMIT 1;
    IF v_parent IS NULL THEN
      PERFORM cwstore._violation('missing_parent', p_graph_id, p_seq, p_id, '$.parents[0]',
                                 format('parent %s does not exist', v_pid));
    ELSIF v_parent >= p_seq THEN
      PERFORM cwstore._violation('parent_order', p_graph_id, p_seq, p_id, '$.parents[0]',
                                 format('parent %s is not earlier in sequence', v_pid));
    END IF;
    INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
    VALUES (p_graph_id, p_seq, 0, v_parent);
    v_parent_seqs := ARRAY[v_parent];
  ELSIF cardinality(p_parents) > 1 THEN
    WITH e AS (
      INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
      SELECT p_graph_id, p_seq, u.o::integer - 1,
             CASE
               WHEN u.prev COLLATE "C" >= u.pid COLLATE "C"
                 THEN cwstore._violation('parent_order', p_graph_id, p_seq, p_id,
                   format('$.parents[%s]', u.o - 1), 'parents must be sorted ascending and listed once')
               WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', p_graph_id, p_seq,
                 p_id, format('$.parents[%s]', u.o - 1), format('parent %s does not exist', u.pid))
               WHEN m.seq >= p_seq THEN cwstore._violation('parent_order', p_graph_id, p_seq,
                 p_id, format('$.parents[%s]', u.o - 1),
                 format('parent %s is not earlier in sequence', u.pid))
               ELSE m.seq
             END
        FROM (SELECT x.pid, x.o, lag(x.pid) OVER (ORDER BY x.o) AS prev
                FROM unnest(p_parents) WITH ORDINALITY AS x(pid, o)) u
        LEFT JOIN LATERAL (SELECT m.seq FROM cwstore.nodes m
                            WHERE m.graph_id = p_graph_id AND m.id = u.pid LIMIT 1) m ON true
       ORDER BY u.o
      RETURNING parent_seq)
    SELECT array_agg(e.parent_seq) INTO v_parent_seqs FROM e;
  END IF;

  IF p_key IS NULL THEN
    RETURN v_parent_seqs;
  END IF;
  SELECT h.head_seq, h.head_id, h.version INTO v_head
    FROM cwstore.key_heads h WHERE h.graph_id = p_graph_id AND h.key = p_key;
  IF FOUND THEN
    IF NOT (v_head.head_id = ANY (p_parents)) THEN
      PERFORM cwstore._chain_conflict(p_graph_id, p_key, p_seq, p_id, v_head.head_id, p_parents);
    END IF;
    INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
    VALUES (p_graph_id, p_key, v_head.version, v_head.head_seq, p_seq);
    UPDATE cwstore.key_heads SET head_seq = p_seq, head_id = p_id, version = v_head.version + 1
     WHERE graph_id = p_graph_id AND key = p_key;
  ELSE
    INSERT INTO cwstore.key_heads (graph_id, key, head_seq, head_id, version, first_seq)
    VALUES (p_graph_id, p_key, p_seq, p_id, 1, p_seq);
  END IF;
  RETURN v_parent_seqs;
END $$;

-- The CHECK constraints of the tables an append writes, moved: a node row's rules to the
-- nodes trigger (_node_row_check, refusing as the constraints did), those of the rows
-- derived from nodes dropped (the trigger writes them, from rows that passed).

CREATE FUNCTION cwstore._node_row_check(p_seq bigint, p_id text, p_kind text, p_created text,
                                        p_key text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
           WHEN NOT (p_seq >= 1) THEN 'nodes_seq_check'
           WHEN NOT (length(p_id) = 27 AND left(p_id, 3) = 'cw_'
                     AND translate(substr(p_id, 4), '0123456789abcdef', '') = '')
             THEN 'nodes_id_check'
           WHEN NOT (p_kind = ANY (cwstore.node_kinds())) THEN 'nodes_kind_check'
           WHEN NOT (p_created ~
                     '^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$')
             THEN 'nodes_created_at_check'
           WHEN p_key = '' THEN 'nodes_resource_key_check'
         END
$$;

CREATE FUNCTION cwstore._refuse_node_row(p_rule text, p_graph_id bigint, p_seq bigint,
                                         p_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = p_rule,
    SCHEMA = 'cwstore', TABLE = 'nodes',
    MESSAGE = format('new row for relation "nodes" violates check constraint "%s"', p_rule),
    DETAIL = format('node %s, sequence %s of graph id %s: %s', quote_literal(p_id), p_seq,
                    p_graph_id,
                    CASE p_rule
                      WHEN 'nodes_seq_check' THEN 'sequences count from 1'
                      WHEN 'nodes_id_check' THEN 'an id is cw_ and 24 lowercase hex digits'
                      WHEN 'nodes_kind_check' THEN 'a kind is one of cwstore.node_kinds()'
                      WHEN 'nodes_created_at_check'
                        THEN 'a createdAt is an RFC 3339 date-time with a zone'
                      ELSE 'a resourceKey is not empty'
                    END);
END $$;

ALTER TABLE cwstore.nodes DROP CONSTRAINT nodes_seq_check, DROP CONSTRAINT nodes_id_check,
  DROP CONSTRAINT nodes_kind_check, DROP CONSTRAINT nodes_created_at_check,
  DROP CONSTRAINT nodes_resource_key_check;
ALTER TABLE cwstore.edges DROP CONSTRAINT edges_order_check;
ALTER TABLE cwstore.key_versions DROP CONSTRAINT key_versions_check;
ALTER TABLE cwstore.graphs DROP CONSTRAINT graphs_length_check;

-- The nodes trigger reads a single node's fields in the aggregate that sums the statement
-- up (no statement of its own to read that one row).
CREATE OR REPLACE FUNCTION cwstore._nodes_inserted() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
  nd record;
  v_rows bigint;
  v_semantic boolean;
  v_keyed boolean;
  v_gid bigint;
  v_gid_last bigint;
  v_lo bigint;
  v_hi bigint;
  v_gids bigint[];
  v_los bigint[];
  v_his bigint[];
  v_cnts bigint[];
  v_work_mem text;
  v_jit text;
  a_seq bigint[];
  a_id text[];
  v_new bigint[];
  v_closed bigint[];
  v_parent_seqs bigint[];
  v_lag bigint;
  s_seq bigint[];
  s_id text[];
  s_payload text[];
  s_key text[];
  p_child bigint[];
  p_id text[];
  p_pos integer[];
  p_pid text[];
  p_prev text[];
  p_folds boolean[];
  k_key text[];
  k_seq bigint[];
  k_id text[];
  k_parents text[];
  v_one_id text;
  v_one_kind text;
  v_one_parents text[];
  v_one_key text;
  v_rule text;
  v_rows_ok boolean;
BEGIN
  -- Every new row is checked by the rules of a node row first (_node_row_check).
  -- A statement of one node (no second row; most appends) is read by a scan of its one
  -- row, and derived here unless it is semantic: two scans and a few calls cost less
  -- than starting the aggregates and the arrays a statement of several nodes needs.
  PERFORM FROM new_nodes n OFFSET 1 LIMIT 1;
  IF NOT FOUND THEN
    SELECT n.graph_id, n.seq, n.id, n.kind, n.parents, n.resource_key,
           cwstore._node_row_check(n.seq, n.id, n.kind, n.created_at_text, n.resource_key)
      INTO v_gid, v_lo, v_one_id, v_one_kind, v_one_parents, v_one_key, v_rule
      FROM new_nodes n;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    IF v_rule IS NOT NULL THEN
      PERFORM cwstore._refuse_node_row(v_rule, v_gid, v_lo, v_one_id);
    END IF;
    IF v_one_kind <> 'semantic' THEN
      v_parent_seqs := cwstore._derive_node(v_gid, v_lo, v_one_id COLLATE "default",
                                            v_one_parents, v_one_key COLLATE "default");
      IF v_one_kind = 'system' AND cardinality(v_one_parents) = 0 THEN
        v_lag := cwstore._advance_length(v_gid, v_lo, v_lo, 1, NULL, NULL);
      ELSE
        v_lag := cwstore._advance_length(v_gid, v_lo, v_lo, 1, ARRAY[v_lo], v_parent_seqs);
      END IF;
      IF v_lag >= cwstore.derive_lag() THEN
        PERFORM cwstore._derive_history(v_gid, v_lo);
      END IF;
      RETURN NULL;
    END IF;
    v_gid_last := v_gid;
    v_hi := v_lo;
    v_rows := 1;
    v_semantic := true;
    v_keyed := true;
  ELSE
    -- The batch's graphs (usually one: then one aggregate gives its first and last
    -- sequence and count, the others only when there are more) and what its nodes hold.
    SELECT min(n.graph_id), max(n.graph_id), min(n.seq), max(n.seq), count(*),
           bool_or(n.kind = 'semantic'), bool_or(n.resource_key IS NOT NULL),
           bool_and(cwstore._node_row_check(n.seq, n.id, n.kind, n.created_at_text,
                                            n.resource_key) IS NULL)
      INTO v_gid, v_gid_last, v_lo, v_hi, v_rows, v_semantic, v_keyed, v_rows_ok
      FROM new_nodes n;
    IF NOT v_rows_ok THEN
      -- The first row written that breaks a rule (the transition table keeps their order).
      SELECT x.rule, n.graph_id, n.seq, n.id INTO v_rule, v_gid, v_lo, v_one_id
        FROM new_nodes n
       CROSS JOIN LATERAL (SELECT cwstore._node_row_check(n.seq, n.id, n.kind, n.created_at_text,
                                                          n.resource_key) AS rule) x
       WHERE x.rule IS NOT NULL
       LIMIT 1;
      PERFORM cwstore._refuse_node_row(v_rule, v_gid, v_lo, v_one_id);
    END IF;
  END IF;
  IF v_gid = v_gid_last THEN
    v_gids := ARRAY[v_gid];
    v_los := ARRAY[v_lo];
    v_his := ARRAY[v_hi];
    v_cnts := ARRAY[v_rows];
  ELSE
    SELECT array_agg(x.graph_id), array_agg(x.lo), array_agg(x.hi), array_agg(x.cnt)
      INTO v_gids, v_los, v_his, v_cnts
      FROM (SELECT n.graph_id, min(n.seq) AS lo, max(n.seq) AS hi, count(*) AS cnt
              FROM new_nodes n GROUP BY n.graph_id) x;
  END IF;

  IF v_semantic THEN
    FOREACH v_gid IN ARRAY v_gids LOOP
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.payload_text ORDER BY n.seq), array_agg(n.resource_key ORDER BY n.seq)
        INTO s_seq, s_id, s_payload, s_key
        FROM new_nodes n WHERE n.kind = 'semantic' AND n.graph_id = v_gid;
      IF s_seq IS NOT NULL THEN
        PERFORM cwstore._check_semantic(v_gid, s_seq, s_id, s_payload, s_key);
      END IF;
    END LOOP;
  END IF;

  IF v_rows > 3 THEN
    v_work_mem := current_setting('work_mem');
    v_jit := current_setting('jit');
    PERFORM set_config('work_mem', '64MB', true), set_config('jit', 'off', true);
  END IF;
  FOR i IN 1 .. cardinality(v_gids) LOOP
    v_gid := v_gids[i];
    v_new := NULL;
    v_closed := NULL;
    IF v_rows <= 3 THEN
      FOR nd IN SELECT n.seq, n.id, n.kind, n.parents, n.resource_key
                  FROM new_nodes n WHERE n.graph_id = v_gid ORDER BY n.seq LOOP
        -- The ids and keys as the default collation: nodes' are "C", and a "C" argument
        -- would make every text comparison in _derive_node "C", which the indexes of
        -- key_heads and key_versions cannot serve (a scan of the graph's rows).
        v_parent_seqs := cwstore._derive_node(v_gid, nd.seq, nd.id COLLATE "default",
                                              nd.parents, nd.resource_key COLLATE "default");
        IF NOT (nd.kind = 'semantic' OR (nd.kind = 'system' AND cardinality(nd.parents) = 0)) THEN
          v_new := v_new || nd.seq;
          v_closed := v_closed || v_parent_seqs;
        END IF;
      END LOOP;
    ELSE
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.seq ORDER BY n.seq)
               FILTER (WHERE NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0)))
        INTO a_seq, a_id, v_new
        FROM new_nodes n WHERE n.graph_id = v_gid;
      -- One row per (child, parent), with the parent before it in the child's list.
      -- (lag(), not an element found by its index: a text[] element is read from the
      -- array's start, quadratic in a node's parents.)
      SELECT array_agg(u.seq), array_agg(u.id), array_agg(u.ord::integer - 1), array_agg(u.pid),
             array_agg(u.prev), array_agg(u.folds)
        INTO p_child, p_id, p_pos, p_pid, p_prev, p_folds
        FROM (SELECT n.seq, n.id, x.ord, x.pid,
                     lag(x.pid) OVER (PARTITION BY n.seq ORDER BY x.ord) AS prev,
                     n.kind <> 'semantic' AS folds
                FROM new_nodes n, unnest(n.parents) WITH ORDINALITY AS x(pid, ord)
               WHERE n.graph_id = v_gid) u;
      v_closed := cwstore._derive_parents(v_gid, a_seq, a_id, p_child, p_id, p_pos, p_pid,
                                          p_prev, p_folds);
      IF v_keyed THEN
        SELECT array_agg(n.resource_key ORDER BY n.seq), array_agg(n.seq ORDER BY n.seq),
               array_agg(n.id ORDER BY n.seq), array_agg(n.parents::text ORDER BY n.seq)
          INTO k_key, k_seq, k_id, k_parents
          FROM new_nodes n WHERE n.graph_id = v_gid AND n.resource_key IS NOT NULL;
        IF k_key IS NOT NULL THEN
          PERFORM cwstore._derive_chains(v_gid, k_key, k_seq, k_id, k_parents);
        END IF;
      END IF;
    END IF;
    v_lag := cwstore._advance_length(v_gid, v_los[i], v_his[i], v_cnts[i], v_new, v_closed);
    IF v_lag >= cwstore.derive_lag() THEN
      PERFORM cwstore._derive_history(v_gid, v_his[i]);
    END IF;
  END LOOP;
  IF v_rows > 3 THEN
    PERFORM set_config('work_mem', v_work_mem, true), set_config('jit', v_jit, true);
  END IF;
  RETURN NULL;
END
$body$;
