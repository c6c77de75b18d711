"""A site folder that makes a package's entry points visible without installing it."""

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "plugin"


def dist_info(site: Path, name: str, groups: dict[str, dict[str, str]]) -> None:
    """A ``*.dist-info`` folder in ``site`` declaring ``groups`` of entry points: what pip
    writes, minus the files, so importlib.metadata finds the entry points."""
    folder = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    lines = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in entries.items()]
    (folder / "entry_points.txt").write_text("\n".join(lines) + "\n")


def example_site(site: Path) -> Path:
    """``site`` holding the example plugin's metadata, its entry points as its pyproject
    declares them (the package itself is imported from examples/plugin)."""
    spec = tomllib.loads((PLUGIN / "pyproject.toml").read_text())
    dist_info(site, spec["project"]["name"], spec["project"]["entry-points"])
    return site
