-- 0009_append_memory: an append's payload checks in bounded memory and linear time.
--
-- Why: one append_v1 call at the 4 MiB payload limit took 137 MB of backend memory
-- (34 times the payload, for 200,000 objects {"a":1}), where cwstore import (COPY)
-- takes 24 MB: the repeated-name check split the payload into a text per child value,
-- copied into arrays, and regular expressions over the whole payload took 4 bytes a
-- character. It also walked nested containers one level at a time, re-reading all that
-- a level holds: 9,000 objects nested around a long string took 346 s.
--
--   * _members_unique_large: names read as a stream of rows from the text cut at its
--     quotes (string_to_table), each name's object found from the depth of brackets,
--     repeated names found by grouping (rows spill to temporary files past work_mem,
--     set to 1MB there). Replaces the walk, and _json_slices (dropped).
--   * _payload_problem: over 64 kB, the bare text, the number check and the depth check
--     read the text in parts (_json_bare, _bare_number_problem, _too_deep); whitespace
--     outside strings found with strpos.
--   * _ascii_depth_change: a long stretch of brackets counted in slices.
--
-- The same payloads are accepted and refused. The definitions below are those of
-- cwstore/sql/schema/60_write_api.sql, where they are documented.
--
-- Safe with live writers: yes; functions only, replaced between transactions.

-- 60_write_api

CREATE OR REPLACE FUNCTION cwstore._ascii_depth_change(p_text text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT coalesce(sum(length(translate(t, '}]', '')) - length(translate(t, '{[', ''))), 0)
    FROM (SELECT convert_from(substring(b.b FROM i FOR 65536), 'UTF8') AS t
            FROM (SELECT convert_to(p_text, 'UTF8') AS b) b,
                 generate_series(1, octet_length(p_text), 65536) AS i) x
$$;

CREATE OR REPLACE FUNCTION cwstore._members_unique_large(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT NOT EXISTS (
    SELECT 1
      FROM (SELECT s.k, s.is_name,
                   max(s.r) FILTER (WHERE s.opens) OVER (PARTITION BY s.d ORDER BY s.r) AS c
              FROM (SELECT g.r, g.opens, g.k,
                           g.r % 2 = 1 AND lead(g.first) OVER (ORDER BY g.r) = ':' AS is_name,
                           sum(g.delta) OVER (ORDER BY g.r) AS d
                      FROM (SELECT p.r,
                                   CASE WHEN p.r % 2 = 1 THEN string_agg(p.k, '"' ORDER BY p.o) END AS k,
                                   min(p.first) AS first,
                                   p.r % 2 = 0 AND min(p.last) = '{' AS opens,
                                   CASE WHEN p.r % 2 = 1 THEN 0 ELSE min(p.delta) END AS delta
                              FROM (SELECT x.o, x.k, x.first, x.last, x.delta,
                                           count(*) FILTER (WHERE x.real)
                                             OVER (ORDER BY x.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS r
                                      FROM (SELECT o, left(t, 1) AS first, right(t, 1) AS last,
                                                   right(t, 1) <> '\' OR (length(t) - length(rtrim(t, '\'))) % 2 = 0 AS real,
                                                   CASE WHEN octet_length(t) <= 64 THEN t
                                                        ELSE sha256(convert_to(t, 'UTF8'))::text END AS k,
                                                   CASE WHEN octet_length(t) <= 65536
                                                          THEN length(translate(t, '}]', ''))
                                                               - length(translate(t, '{[', ''))
                                                        WHEN octet_length(t) = length(t)
                                                          THEN cwstore._ascii_depth_change(t) END AS delta
                                              FROM string_to_table(p_text, '"') WITH ORDINALITY AS y(t, o)) x) p
                             GROUP BY p.r) g) s) n
     WHERE n.is_name
     GROUP BY n.c, n.k
    HAVING count(*) > 1)
$$;

CREATE OR REPLACE FUNCTION cwstore._members_unique(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  IF octet_length(p_text) <= 65536 THEN
    RETURN cwstore._members_unique_small(p_text, p_bare);
  END IF;
  RETURN cwstore._members_unique_large(p_text);
END $$;

CREATE OR REPLACE FUNCTION cwstore._json_bare(p_rest text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT string_agg(t, '""' ORDER BY o)
    FROM string_to_table(p_rest, '"') WITH ORDINALITY AS x(t, o)
   WHERE o % 2 = 1
$$;

CREATE OR REPLACE FUNCTION cwstore._bare_number_problem(p_bare text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT m[1]
    FROM string_to_table(p_bare, ',') WITH ORDINALITY AS x(t, o)
   CROSS JOIN LATERAL regexp_matches(x.t, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
   WHERE x.t ~ '[.eE]|[0-9]{16}|-0'
     AND m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
   ORDER BY x.o
   LIMIT 1
$$;

CREATE OR REPLACE FUNCTION cwstore._too_deep(p_bare text, p_limit integer) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT EXISTS (
    SELECT 1
      FROM (SELECT x.t, x.opens,
                   coalesce(sum(x.opens - x.closes)
                              OVER (ORDER BY x.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                            0) AS depth
              FROM (SELECT t, o, length(t) - length(translate(t, '{[', '')) AS opens,
                           length(t) - length(translate(t, '}]', '')) AS closes
                      FROM string_to_table(p_bare, ',') WITH ORDINALITY AS s(t, o)) x) p
     WHERE p.depth + p.opens > p_limit
       AND p.depth + (SELECT max(d)
                        FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1
                                              WHEN c IN ('}', ']') THEN -1 ELSE 0 END)
                                       OVER (ORDER BY i) AS d
                                FROM string_to_table(p.t, NULL) WITH ORDINALITY AS c(c, i)) y)
           > p_limit)
$$;

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
  -- What is left outside strings: punctuation, literals and numbers, nothing else. Over
  -- 64 kB, each check reads the text in parts (_json_bare, _bare_number_problem,
  -- _too_deep):
  -- a regular expression over the whole text takes 4 bytes a character.
  IF octet_length(v_rest) <= 65536 THEN
    v_bare := regexp_replace(v_rest, '"[^"]*"', '""', 'g');
  ELSE
    v_bare := cwstore._json_bare(v_rest);
  END IF;
  IF strpos(v_bare, ' ') > 0 OR strpos(v_bare, E'\n') > 0 OR strpos(v_bare, E'\t') > 0
     OR strpos(v_bare, E'\r') > 0 THEN
    RETURN 'shape|$.payload|whitespace outside strings: send the payload as JSON.stringify writes it (compact)';
  END IF;
  IF octet_length(v_bare) <= 65536 THEN
    IF v_bare ~ '[.eE]|[0-9]{16}|-0' THEN
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
  -- Nesting depth: the deepest point of the running count of brackets outside strings.
  IF octet_length(v_bare) <= 65536 THEN
    v_deep := length(v_bare) - length(translate(v_bare, '{[', '')) > 10000
              AND (SELECT max(d) FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1 ELSE -1 END)
                                                OVER (ORDER BY o) AS d
                                         FROM string_to_table(regexp_replace(v_bare, '[^][{}]', '', 'g'),
                                                              NULL) WITH ORDINALITY AS t(c, o)) x) > 10000;
  ELSE
    v_deep := cwstore._too_deep(v_bare, 10000);
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

DROP FUNCTION cwstore._json_slices(text[]);
