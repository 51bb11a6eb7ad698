"""The course site (``make site``) in a real browser, with the network cut off.

The site is built once for this module (``amp_edu.course.site.build`` into a temporary folder,
about 20 s), then Debian's Chromium, driven by Playwright as in ``tests/course/test_browser.py``, opens it
from ``file://`` with *every* other request refused and recorded. The test asserts what a learner
reading the site offline must get:

* every lesson page of the lesson list opens, and no request left the machine (0 recorded);
* the navigation of every page links every lesson;
* every explorer's static picture is on its page and has loaded (non-zero natural width), as many
  as the stored notebook has;
* the intro's formula was typeset by the MathJax the site serves itself;
* the search page finds lesson 04 for a word of its text;
* a screenshot of a lesson page is not blank (pixel variance), saved for a person to look at.
"""

import json
from pathlib import Path

import pytest

from amp_edu.course import site
from amp_edu.course.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SEARCH_TERM = "GradScaler"      # lesson 04's subject; the search must list its page


def _why_not() -> str | None:
    if not CHROMIUM.exists():
        return f"Chromium is not installed at {CHROMIUM}: `make browser` installs it (apt-get, as root)"
    for mod in ("playwright.sync_api", "jupyter_book"):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod.split('.')[0]} is not installed: `make install`"
    return None


pytestmark = [pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The site, built once: the path of its ``html`` folder."""
    tmp = tmp_path_factory.mktemp("site")
    index = site.build(tmp / "out", src=tmp / "src")
    return index.parent


@pytest.fixture(scope="module")
def browser(built):
    """``(page, outside)``: a Chromium page on which every non-``file://`` request is aborted and
    its URL appended to ``outside``."""
    from playwright.sync_api import sync_playwright
    outside: list[str] = []
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROME_ARGS, timeout=60_000)
        try:
            ctx = b.new_context(viewport={"width": 1300, "height": 1000})

            def refuse(route):
                if route.request.url.startswith("file://"):
                    route.continue_()
                else:
                    outside.append(route.request.url)
                    route.abort()
            ctx.route("**/*", refuse)
            pg = ctx.new_page()
            pg.set_default_timeout(30_000)
            yield pg, outside
        finally:
            b.close()
    finally:
        pw.stop()


def _open(pg, built: Path, rel: str):
    pg.goto((built / rel).as_uri())
    pg.wait_for_load_state("load")


def _explorer_pictures(lesson) -> int:
    nb = json.loads((ROOT / lesson.notebook).read_text())
    return sum(1 for c in nb["cells"] for o in c.get("outputs", [])
               if site.WIDGET_MIME in o.get("data", {}) and "image/png" in o.get("data", {}))


def test_every_lesson_page_offline(browser, built):
    pg, outside = browser
    hrefs = [f"notebooks/{l.stem}.html" for l in LESSONS]
    for lesson, rel in zip(LESSONS, hrefs):
        _open(pg, built, rel)
        assert pg.title().startswith(f"{lesson.number:02d}"), (rel, pg.title())
        nav = pg.eval_on_selector_all("nav.bd-docs-nav a", "els => els.map(e => e.href)")
        for other in hrefs:
            assert any(h.split("#")[0].endswith(other) for h in nav), f"{rel}: the navigation has no link to {other}"
        assert pg.locator("div.admonition", has_text="Run this lesson").count() == 1, rel
        imgs = pg.eval_on_selector_all(f"img.{site.EXPLORER_CLASS}",
                                       "els => els.map(e => [e.complete, e.naturalWidth, e.src])")
        assert len(imgs) == _explorer_pictures(lesson), (rel, imgs)
        for complete, width, src in imgs:
            assert complete and width > 0, f"{rel}: the explorer picture {src} did not load"
        assert pg.locator("text=Error displaying widget").count() == 0, rel
    assert outside == [], f"requests left the machine: {outside}"


def test_intro_math_is_typeset_by_the_sites_own_mathjax(browser, built):
    pg, outside = browser
    _open(pg, built, "intro.html")
    pg.wait_for_selector("mjx-container", timeout=30_000)
    scripts = pg.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
    assert any("_static/mathjax/tex-chtml.js" in s for s in scripts), scripts
    assert outside == [], f"requests left the machine: {outside}"


def test_search_finds_lesson_04(browser, built):
    pg, outside = browser
    pg.goto((built / "search.html").as_uri() + f"?q={SEARCH_TERM}")
    pg.wait_for_selector("#search-results li a", timeout=30_000)
    found = pg.eval_on_selector_all("#search-results li a", "els => els.map(e => e.href)")
    assert any(h.split("#")[0].endswith("notebooks/04_gradscaler_from_scratch.html") for h in found), found
    assert outside == [], f"requests left the machine: {outside}"


def test_a_lesson_page_screenshot_is_not_blank(browser, built, tmp_path_factory):
    import numpy as np
    from PIL import Image
    pg, _ = browser
    _open(pg, built, "notebooks/04_gradscaler_from_scratch.html")
    pg.locator(f"img.{site.EXPLORER_CLASS}").first.scroll_into_view_if_needed()
    shot = tmp_path_factory.mktemp("screenshot") / "site_04_explorer.png"
    pg.screenshot(path=str(shot))
    print(f"screenshot: {shot}")
    grey = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert grey.var() > 100, f"{shot} looks blank (pixel variance {grey.var():.0f})"
    assert (grey < 128).mean() > 0.005, f"{shot} has almost no dark (text) pixels"
