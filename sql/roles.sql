-- roles.sql: the roles cwstore_reader, cwstore_writer and cwstore_admin (who may erase,
-- docs/erasure.md) and their grants, run by
-- `cwstore init --roles` after the migrations, as the schema's owner with CREATEROLE.
-- Idempotent. What each role may do: cwstore.apply_grants() (schema/50_tenancy.sql).
-- All are NOLOGIN group roles: grant them to login roles (GRANT cwstore_writer TO
-- worker) and put those in tenants (SELECT cwstore.add_tenant_member(tenant, role)).

DO $roles$
BEGIN
  IF pg_catalog.to_regrole('cwstore_reader') IS NULL THEN
    CREATE ROLE cwstore_reader NOLOGIN;
  END IF;
  IF pg_catalog.to_regrole('cwstore_writer') IS NULL THEN
    CREATE ROLE cwstore_writer NOLOGIN;
  END IF;
  IF NOT pg_catalog.pg_has_role('cwstore_writer', 'cwstore_reader', 'MEMBER') THEN
    GRANT cwstore_reader TO cwstore_writer;
  END IF;
  IF pg_catalog.to_regrole('cwstore_admin') IS NULL THEN
    CREATE ROLE cwstore_admin NOLOGIN;
  END IF;
  IF NOT pg_catalog.pg_has_role('cwstore_admin', 'cwstore_writer', 'MEMBER') THEN
    GRANT cwstore_writer TO cwstore_admin;
  END IF;
END
$roles$;

SELECT cwstore.apply_grants();
