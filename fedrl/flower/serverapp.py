"""fedrl's ServerApp builder (the entry point ``server_app.py`` only calls it)."""

from __future__ import annotations

import logging

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedrl.checks.validate import check, config_warnings
from fedrl.errors import ConfigError
from fedrl.flower.server_loop import run
from fedrl.runfolder.logs import setup_logging

log = logging.getLogger("fedrl")


def make_server_app() -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        setup_logging()
        cfg = check(context.run_config)  # fails before round 1 on any bad key or value
        for warning in config_warnings(cfg):
            log.warning("%s", warning)
        try:
            run(grid, cfg)
        except ConfigError as err:  # e.g. a checkpoint that does not fit (RunFileError): say it in one line
            log.error("run refused: %s", err)
            raise

    return app
