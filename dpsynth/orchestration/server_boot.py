"""The temporary Prefect server's process: Prefect's server code imported first, the server
started only when the CLI says so.

:mod:`.server` starts it at the very start of a Prefect-engine release (right after the CLI
parsed its arguments), so its imports (uvicorn and Prefect's server app, about 3 CPU s of
the server's 4 to its first answer) overlap the CLI's own. It then waits for one line on
stdin: the port and the settings the database plan decided (:mod:`.prefect_db`), sent once
the public checks have passed. Without that line (the request was refused, or the CLI
ended) it exits having bound no port and opened no database. With it, it serves Prefect's
app as ``uvicorn --factory prefect.server.api.server:create_app`` does (what Prefect's own
temporary server runs).
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["main"]


def main() -> int:
    """Imports, waits for the CLI's word, then serves until SIGTERM."""
    import uvicorn
    import prefect.server.api.server  # noqa: F401 - the import is the point: done before the word

    line = sys.stdin.readline()
    if not line.strip():
        return 0  # no word: nothing was started
    order = json.loads(line)
    os.environ.update({str(k): str(v) for k, v in order.get("env", {}).items()})
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()  # Prefect read its settings at import, before the word's
    uvicorn.run("prefect.server.api.server:create_app", factory=True, host="127.0.0.1", port=int(order["port"]),
                log_level="error", lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
