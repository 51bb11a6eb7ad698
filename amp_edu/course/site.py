"""The course as a static website that works offline (``make site``).

Learners of most courses read them as websites. This module builds one from the *stored*
notebooks with Jupyter Book 1.x (Sphinx + myst-nb), executing nothing, and makes every page work
from ``file://`` and behind a firewall: nothing is loaded from outside the site.

What a stock Jupyter Book would fetch, and what is done instead:

* **MathJax** comes from a CDN by default. Here the npm package (:data:`MATHJAX`, fetched once with
  ``npm pack`` into ``build/vendor/``) is copied into the site's ``_static/`` and Sphinx's
  ``mathjax_path`` points at it.
* **Widgets.** A notebook that stored widget state makes myst-nb load require.js and the widget
  manager from CDNs, and a widget output then renders as an empty box. The site cannot run a kernel
  anyway, so it shows what the stored output also carries: each explorer's *static picture* (the
  ``image/png`` that :class:`amp_edu.widgets.base.Explorer` adds to its bundle), with a caption
  saying it is a picture of the default state. ``nb_ipywidgets_js`` is emptied, the widget mime type
  is dropped from the render priority, and the stored widget state is left out of the pages.
* **Fonts and theme** (pydata-sphinx-theme's FontAwesome) ship inside the Python packages.

The lesson list, the table of contents and the "run this lesson" box come from
:mod:`amp_edu.course.lessons` (one owner per fact), so a new lesson appears on the site with its
entry there. The configuration (``_config.yml``, ``_toc.yml``) is generated into
``build/site-src/`` with copies of the notebooks; the site is written to ``build/site/html/``.
``tests/course/test_site.py`` opens every page in Chromium with every outside request refused.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from . import hosted
from .lessons import LESSONS, Lesson

__all__ = ["MATHJAX", "WIDGET_MIME", "EXPLORER_CLASS", "lesson_pages", "toc", "config", "intro",
           "run_box", "stage_notebook", "site_pages", "vendor_mathjax", "stage", "build", "main"]

MATHJAX = "mathjax@3.2.2"                      # the npm package whose es5/ bundle the site serves
# what of that bundle the site needs: the TeX-to-HTML component, its extensions (loaded on
# demand), its fonts, and the menu; not the speech engine (sre/, 4 MB)
_MATHJAX_PARTS = ("tex-chtml.js", "input/", "output/chtml/fonts/woff-v2/", "ui/", "a11y/")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
EXPLORER_CLASS = "amp-explorer"                # the class of every explorer picture's <img>
LONG_OUTPUT_LINES = 40                          # outputs longer than this scroll inside a box

_CSS = """\
/* amp_edu site: long outputs wrap instead of running off the page, and tall ones scroll */
div.cell_output pre { white-space: pre-wrap; overflow-wrap: anywhere; }
div.cell.tag_output_scroll div.cell_output { max-height: 32em; overflow-y: auto; }
img.amp-explorer { border: 1px solid #ccc; max-width: 100%; }
"""


def lesson_pages(lessons=LESSONS, root: Path | None = None) -> list[Lesson]:
    """The lessons the site shows, in course order. Each must have its stored notebook."""
    root = Path(root) if root is not None else _root()
    if not all(isinstance(l, Lesson) for l in lessons):
        raise TypeError("lessons must be amp_edu.course.lessons.Lesson entries")
    missing = [l.notebook for l in lessons if not (root / l.notebook).is_file()]
    if missing:
        raise ValueError(f"lessons listed in amp_edu/course/lessons.py without a notebook: {', '.join(missing)}")
    return sorted(lessons, key=lambda l: l.number)


def toc(lessons) -> dict:
    """Jupyter Book's ``_toc.yml``: the intro, every lesson in order, then the README."""
    return {"format": "jb-book", "root": "intro",
            "parts": [{"caption": "Lessons", "chapters": [{"file": f"notebooks/{l.stem}"} for l in lessons]},
                      {"caption": "About the course", "chapters": [{"file": "README"}]}]}


def config(title: str = "amp_edu: mixed-precision training in PyTorch") -> dict:
    """Jupyter Book's ``_config.yml``: nothing executed, nothing loaded from outside the site."""
    return {
        "title": title,
        "author": "the amp_edu course",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        "launch_buttons": {"notebook_interface": "jupyterlab", "binderhub_url": "", "colab_url": "",
                           "jupyterhub_url": "", "thebe": False},
        "html": {"use_repository_button": False, "use_issues_button": False,
                 "use_edit_page_button": False, "use_download_button": True, "use_multitoc_numbering": False,
                 "home_page_in_navbar": True, "comments": {"hypothesis": False, "utterances": False}},
        "sphinx": {"config": {
            "mathjax_path": "mathjax/tex-chtml.js",     # under _static/, see vendor_mathjax
            "html_static_path": ["_static"],
            "html_css_files": ["amp_site.css"],
            "html_copy_source": False,                 # the notebooks' .txt copies: 2x the size, unused
            "nb_ipywidgets_js": {},                    # no require.js, no widget manager from a CDN
            "nb_mime_priority_overrides": [["html", WIDGET_MIME, None]],   # the static picture instead
            "nb_merge_streams": True,
        }},
    }


def run_box(lesson: Lesson) -> str:
    """The "run this lesson" box at the top of each lesson page (MyST markdown): one line, and the
    hosted-runtime install cell folded under it."""
    cell = hosted.INSTALL_CELL.rstrip("\n")
    return (f"`````{{admonition}} Run this lesson\n:class: tip\n"
            f"**On your machine:** `make lab` in the course's folder, then open `{lesson.notebook}`. "
            f"**On a hosted GPU runtime** (Colab, Kaggle, a JupyterHub): put the course's folder there "
            f"and run the install cell below first; it keeps the runtime's torch. This page is the lesson "
            f"as stored, run on a CPU; its explorers appear as pictures.\n\n"
            f"````{{dropdown}} The install cell for a hosted runtime\n```python\n{cell}\n```\n````\n"
            f"`````")


def intro(lessons) -> str:
    """The site's front page: install, which lesson when, and the CPU-class reference runs."""
    from ..bench import classes, report
    rows = "\n".join(f"| [{l.number:02d}](notebooks/{l.stem}.ipynb) | {l.title} | {l.you_will} |" for l in lessons)
    n = 1024
    table = classes.class_table(classes.class_rows(report.references(), n=n), n)
    return f"""# Mixed-precision training in PyTorch, from the bits up

A course in Jupyter notebooks: fp16's range and its underflow floor, pure fp16 training breaking,
a GradScaler and an autocast built from scratch and proven equal to PyTorch's, Tensor Core speed
and memory measured on your own hardware, fp8, distributed and compiled mixed precision.

These pages are the lessons as stored in the course, executed on a CPU, and need no network. To
run them, install the course (below); every lesson runs on a laptop CPU as well as on a GPU.

## Install and run

```bash
make lab      # in the course's folder: creates .venv, installs the pinned versions, opens JupyterLab
make test     # runs every test
```

On a hosted notebook runtime that already has a torch (Colab, Kaggle, a JupyterHub), keep that
torch: put the course's folder there and run this cell once (the README's "Which PyTorch" says which
versions are tested):

```python
{hosted.INSTALL_CELL.rstrip()}
```

## Which lesson when

Lessons 00–05 are the core, in order: the formats, why fp16 training breaks, loss scaling and
autocast built by hand. After them the lessons stand on their own: 06–07 measure speed and memory,
08 is the everyday recipe, 09 the failures you will meet, 10–13 fp8, several processes, the
optimizer's own precision and `torch.compile`.

| # | lesson | you will |
|---|---|---|
{rows}

The fp16 number a bit pattern stands for, the formula lesson 01 takes apart (a normal number;
exponent field $e$, mantissa field $m$):

$$x = (-1)^{{s}} \\cdot 2^{{e-15}} \\cdot \\left(1 + \\frac{{m}}{{1024}}\\right)$$

## The CPU-class reference runs

Whether bf16 beats fp32 on a CPU depends on the CPU's class. The course ships benchmark runs of
each class (`amp_edu/reference/`); lessons 00 and 06 print your own machine beside them. The ratios
of fp32's matmul time to bf16's at {n}³, and the speed-up of a whole AMP bf16 training step, as
those runs recorded them:

```text
{table}
```
"""


def _explorer_picture(output) -> bool:
    data = output.get("data", {})
    return WIDGET_MIME in data and "image/png" in data


def stage_notebook(nb, lesson: Lesson):
    """A copy of a stored lesson, ready for the site: the "run this lesson" box after its title;
    each explorer as its static picture with a caption (a widget stored without one as a note
    saying it needs a kernel); long outputs tagged to scroll; no stored widget state."""
    import nbformat
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outs = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if _explorer_picture(out):
                cell.metadata["mystnb"] = {
                    "image": {"classes": EXPLORER_CLASS,
                              "alt": f"static picture of the lesson {lesson.number:02d} explorer"},
                    "figure": {"caption": "Static picture of this explorer's default state. Run the "
                                          "lesson (box at the top) to move its controls."}}
                out = copy.deepcopy(out)
                out["data"] = {m: v for m, v in data.items() if m != WIDGET_MIME}
            elif WIDGET_MIME in data:
                out = nbformat.v4.new_output("display_data", data={"text/markdown": (
                    "*An interactive explorer is displayed here when the lesson runs (it needs a "
                    "kernel; this page stores no picture of it). Run the lesson: box at the top.*")})
            outs.append(out)
        if outs:
            cell.outputs = outs
        lines = sum(len(_text(o).splitlines()) for o in outs)
        if lines > LONG_OUTPUT_LINES:
            tags = cell.metadata.setdefault("tags", [])
            if "output_scroll" not in tags:
                tags.append("output_scroll")
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, nbformat.v4.new_markdown_cell(run_box(lesson)))
    return nb


def _text(out) -> str:
    if "text" in out:
        t = out["text"]
    else:
        t = out.get("data", {}).get("text/plain", "")
    return "".join(t) if isinstance(t, list) else str(t)


def vendor_mathjax(dest: Path, cache: Path) -> Path:
    """Copy MathJax's browser bundle into ``dest`` (``dest/tex-chtml.js`` and what it loads).

    The npm tarball of :data:`MATHJAX` is fetched once into ``cache`` with ``npm pack`` (npm's own
    registry client); later builds reuse it and need no network."""
    dest, cache = Path(dest), Path(cache)
    name, version = MATHJAX.split("@")
    tarball = cache / f"{name}-{version}.tgz"
    if not tarball.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(f"the site serves MathJax itself and needs {tarball}: install npm "
                               f"(apt-get install npm) or put `npm pack {MATHJAX}`'s tarball there")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "pack", "--silent", MATHJAX], cwd=cache, check=True, stdout=subprocess.DEVNULL)
    if dest.exists():
        shutil.rmtree(dest)
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            rel = member.name.removeprefix("package/es5/")
            if member.isfile() and rel != member.name and rel.startswith(_MATHJAX_PARTS):
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    if not (dest / "tex-chtml.js").is_file():
        raise RuntimeError(f"{tarball} has no package/es5/tex-chtml.js: is it {MATHJAX}?")
    return dest


def stage(src: Path, root: Path | None = None, lessons=None, vendor: Path | None = None) -> Path:
    """Write the book's sources into ``src`` (emptied first): config, toc, intro, README, the
    staged notebooks, the CSS and MathJax. Returns ``src``."""
    import nbformat
    import yaml
    root = Path(root) if root is not None else _root()
    lessons = lesson_pages(LESSONS if lessons is None else lessons, root)
    src = Path(src)
    if src.exists():
        shutil.rmtree(src)
    (src / "notebooks").mkdir(parents=True)
    (src / "_config.yml").write_text(yaml.safe_dump(config(), sort_keys=False))
    (src / "_toc.yml").write_text(yaml.safe_dump(toc(lessons), sort_keys=False))
    (src / "intro.md").write_text(intro(lessons))
    shutil.copy(root / "README.md", src / "README.md")
    for l in lessons:
        nb = nbformat.read(root / l.notebook, as_version=4)
        nbformat.write(stage_notebook(nb, l), src / l.notebook)
    (src / "_static").mkdir()
    (src / "_static" / "amp_site.css").write_text(_CSS)
    vendor_mathjax(src / "_static" / "mathjax", Path(vendor) if vendor else root / "build" / "vendor")
    return src


def build(out: Path | None = None, root: Path | None = None, src: Path | None = None,
          quiet: bool = True) -> Path:
    """Stage the sources into ``src`` (default ``build/site-src``) and build the site into ``out``
    (default ``build/site``). Returns the path of its front page, ``out/html/index.html``."""
    root = Path(root) if root is not None else _root()
    out = Path(out) if out is not None else root / "build" / "site"
    src = stage(Path(src) if src is not None else root / "build" / "site-src", root)
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(src), "--path-output", str(out),
           "--builder", "html", "-W", "-n", "--keep-going"]
    if quiet:
        cmd.append("--quiet")
    r = subprocess.run(cmd, cwd=root, capture_output=quiet, text=True)
    if r.returncode != 0:
        raise RuntimeError("jupyter-book build failed:\n" + ((r.stdout or "") + (r.stderr or ""))[-4000:])
    built = out / "_build" / "html"
    final = out / "html"
    shutil.move(str(built), str(final))
    shutil.rmtree(out / "_build", ignore_errors=True)
    return final / "index.html"


def site_pages(site: Path) -> list[Path]:
    """The content pages of a built site (the intro, the lessons, the README): every ``.html``
    but the theme's ``_static/`` parts, the search and index pages and the front-page redirect."""
    site = Path(site)
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts
                  and p.relative_to(site).as_posix() not in ("search.html", "genindex.html", "index.html"))


def _root() -> Path:
    from .exercises import checkout_root
    return checkout_root()


def main(argv=None) -> int:
    """``python -m amp_edu.course.site [--out DIR]`` (``make site``): build the site, say where."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m amp_edu.course.site", description=main.__doc__)
    ap.add_argument("--out", default=None, help="output folder (default: build/site in the checkout)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        index = build(args.out)
    except (RuntimeError, ValueError) as exc:
        print(f"make site: {exc}", file=sys.stderr)
        return 1
    site = index.parent
    pages = site_pages(site)
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    print(f"site built in {time.perf_counter() - t0:.1f} s: {len(pages)} pages, {size / 2**20:.1f} MiB")
    print(f"open file://{index.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
