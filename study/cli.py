"""The ``study`` command line."""

from __future__ import annotations

import platform

import typer

app = typer.Typer(
    help="Compute-matched studies of contrastive self-supervised learning.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def env() -> None:
    """Print the versions and devices this environment will run studies with."""
    import mlflow
    import optuna
    import pyarrow
    import ray
    import torch
    import torchvision

    cuda = torch.cuda.is_available()
    typer.echo(f"python       {platform.python_version()}")
    typer.echo(f"torch        {torch.__version__} (torchvision {torchvision.__version__})")
    typer.echo(f"ray          {ray.__version__}")
    typer.echo(f"mlflow       {mlflow.__version__}")
    typer.echo(f"optuna       {optuna.__version__}")
    typer.echo(f"pyarrow      {pyarrow.__version__}")
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    typer.echo(f"device       {'cuda: ' + ', '.join(devices) if cuda else 'cpu'}")


@app.callback()
def _root() -> None:
    """Compute-matched studies of contrastive self-supervised learning."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
