"""Install the fork as the distribution `transformers`: the pinned upstream sdist plus `patches/`.

The package is `src/transformers`, a link into the work tree `.fork/`; it is built from the pinned sdist and
the patch series first whenever it is absent or out of date (see `utils/forktool/materialize.py`). The
version is upstream's with a local tag naming the series, `<version>+fork.<patches>.g<digest>` (e.g. `5.25.0+fork.20.g1a2b3c4d`), and the
dependencies, extras and entry points are read from the sdist's own metadata, not retyped here.
"""

import configparser
import re
import sys
from email.parser import Parser
from pathlib import Path

from setuptools import find_packages, setup


ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "utils"))

from forktool.common import read_series, read_upstream  # noqa: E402
from forktool.materialize import materialize, series_stamp  # noqa: E402


def split_requirements(metadata):
    """`Requires-Dist` entries -> (install_requires, extras_require), as the sdist declares them."""
    install_requires, extras = [], {}
    for requirement in metadata.get_all("Requires-Dist") or []:
        spec, _, marker = (part.strip() for part in requirement.partition(";"))
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if extra is None:
            install_requires.append(requirement)
            continue
        rest = marker.replace(extra.group(0), "").strip()
        rest = re.sub(r"^(and\s+)|(\s+and)$", "", rest).strip()
        extras.setdefault(extra.group(1), []).append(f"{spec}; {rest}" if rest else spec)
    return install_requires, extras


def entry_points(egg_info):
    parser = configparser.ConfigParser()
    parser.optionxform = str
    parser.read(egg_info / "entry_points.txt", encoding="utf-8")
    return {section: [f"{k} = {v}" for k, v in parser[section].items()] for section in parser.sections()}


work = materialize(ROOT)
upstream = read_upstream(ROOT)
patches = read_series(ROOT)
metadata = Parser().parsestr((work / "PKG-INFO").read_text(encoding="utf-8"))
install_requires, extras_require = split_requirements(metadata)

setup(
    name=upstream.name,
    version=f"{upstream.version}+fork.{len(patches)}.g{series_stamp(upstream, patches)[:8]}",
    description=f"{metadata['Summary']} (fork: {upstream.name} {upstream.version} with the patches in patches/)",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license=metadata["License"],
    package_dir={"": "src"},
    packages=find_packages("src"),
    include_package_data=True,
    package_data={"": ["**/*.cu", "**/*.cpp", "**/*.cuh", "**/*.h", "**/*.pyx", "py.typed"]},
    zip_safe=False,
    python_requires=metadata["Requires-Python"],
    install_requires=install_requires,
    extras_require=extras_require,
    entry_points=entry_points(work / "src" / f"{upstream.name}.egg-info"),
)
