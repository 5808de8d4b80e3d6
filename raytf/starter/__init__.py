"""What `raytf init` writes into a new project's directory (raytf/cli.py): a config (`raytf.yaml`: 2 workers on an
embedded Ray, results under ./runs) and a training function (`train.py`) to edit. Shipped inside the package, so
an installed raytf starts a project from nothing."""
