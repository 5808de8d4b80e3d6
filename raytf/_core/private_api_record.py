"""The records of raytf's private-API table (_core/private_api_table.py, _core/private_api_keras3.py): a Feature and
the PrivateApi symbols that serve it, with the versions the table was checked against. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

# The versions every symbol below was last checked against (major.minor). tests/task/test_private_apis.py fails on
# others: re-check the table there, then update this.
VERIFIED = {"tensorflow": "2.21", "tf_keras": "2.21", "keras": "3.15", "ray": "2.60"}
# Distribution names, for the version in a message when the package is not imported yet.
DISTRIBUTIONS = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"), "tf_keras": ("tf-keras", "tf_keras"),
                 "keras": ("keras",), "ray": ("ray",)}


@dataclass(frozen=True)
class Feature:
    """What a group of private symbols serves. `required`: correctness needs it (the run is refused at start
    without it); else it is optional and turns off."""

    key: str
    name: str
    without: str
    required: bool = False


@dataclass(frozen=True)
class PrivateApi:
    """One private symbol: `symbol` is "module:attribute.path". It has "changed" when `params` are not its leading
    parameters (raytf calls it positionally, or stands in for it), a name in `keywords` is not among its
    parameters, or a name in `uses` is not among the names its code uses (a global raytf replaces, an attribute
    raytf sets, a method raytf relies on being called)."""

    symbol: str
    feature: Feature
    use: str
    where: str
    params: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()

    @property
    def package(self) -> str:
        return self.symbol.split(".", 1)[0].split(":", 1)[0]

    @property
    def dotted(self) -> str:
        return self.symbol.replace(":", ".")
