"""A local, read-only web page over the graphs' history (``cwstore view``).

:mod:`.serve` runs it (Starlette + uvicorn, the optional extra ``view``); :mod:`.app`
holds the routes; ``static/`` the page and its vendored assets. The command itself is
:mod:`cwstore.cli.view`.
"""
