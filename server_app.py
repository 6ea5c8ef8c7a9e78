"""Flower ServerApp: check the run config, then run the federation (fedrl.flower.server_loop)."""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedrl.flower.server_loop import run
from fedrl.logs import setup_logging
from fedrl.validate import check

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    setup_logging()
    cfg = check(context.run_config)
    run(grid, cfg)
