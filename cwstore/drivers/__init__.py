"""The driver layer: one small protocol, one adapter per PostgreSQL driver.

:mod:`cwstore.store_async` is written once over :class:`~._protocol.AsyncPool` (the
asyncpg adapter, :mod:`.asyncpg`); :mod:`cwstore.store` is generated from it by
``tools/async_to_sync.py`` and runs over :class:`~._protocol.Pool` (the psycopg adapter,
:mod:`.psycopg`). Both adapters take ``$1`` placeholders, hand back rows read by column name
or position (:class:`~._protocol.Row`) with the same Python values, and raise cwstore
errors mapped by :func:`cwstore.errors.map_error`.
"""
