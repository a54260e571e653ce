"""The documentation: the mkdocs site builds in strict mode (every page in the nav, every link
between pages and every anchor resolves), and README.md's links into the repository resolve,
anchors included, the way GitHub renders them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$")
FENCE = re.compile(r"^(```|~~~)")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than hyphens, underscores and
    spaces dropped, each space a hyphen (so "A → B" is "a--b")."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            slug = github_slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize(("heading", "slug"), [
    ("On-demand to spot swap", "on-demand-to-spot-swap"),
    ("The full run (1,213 nodes, 8,335 pods to 99.99 % of the GPUs)",
     "the-full-run-1213-nodes-8335-pods-to-9999--of-the-gpus"),
    ("A real node in the lab: `gpufleet lab up --real-node`",
     "a-real-node-in-the-lab-gpufleet-lab-up---real-node"),
    ("Evidence: Philly (`benchmarks/bench_teams.py`)", "evidence-philly-benchmarksbench_teamspy"),
])
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_readme_links_resolve() -> None:
    readme = ROOT / "README.md"
    broken = []
    for target in LINK.findall(readme.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else readme
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor in {path or 'README.md'}")
    assert not broken, "README.md links:\n" + "\n".join(broken)


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-4000:]
    pages = {p.relative_to(tmp_path / "site").as_posix()
             for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "tutorials/first-simulation/index.html", "architecture/index.html",
            "reference/cli/index.html"} <= pages
