"""raytf's version: the one source of `raytf.__version__`, `raytf --version` and the distribution's metadata
(pyproject.toml reads it). CHANGELOG.md says what each version changed; the deprecation policy is its head's."""

__version__ = "0.2.0"
# The distribution's name on the package index (`pip install raytf-trainer`): `raytf` there is another project
# (0.0.1, 2021, "Tensorflow Cluster on Ray"). The import name and the command stay `raytf`. Checked free on
# 2026-12-01: https://pypi.org/pypi/raytf-trainer/json answered 404 (https://pypi.org/pypi/raytf/json: 200).
DISTRIBUTION = "raytf-trainer"
