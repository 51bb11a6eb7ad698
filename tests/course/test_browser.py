"""Every lesson's widgets, in a real browser: ``make lab`` serves it, headless Chromium runs its cells.

nbval runs every cell of every lesson already; what only a browser can check is the widgets. So
for each lesson of the lesson list (in the session's one JupyterLab server, one after another) the
test clears the outputs, then runs, one by one, the lesson's first code cell (imports, the setup
line), every cell that displays a widget, and every cell those need (:func:`cellgraph.browser_cells`:
the latest earlier cell that binds each name they read, transitively) — all the cells of lesson
08's Try it, whose explorer reads a study the lesson trains; two or three cells of most others.
It waits (bounded) until the kernel is idle with those cells run, then asserts

* no cell has an error output or prints a traceback;
* every widget the cells display is rendered as a widget (no "Error displaying widget", no
  text fallback);
* moving each slider (focus it, press an arrow key) changes what the widget shows (its images or
  text, not counting the slider's own readout).

The lessons run under ``AMP_EDU_SMOKE=1`` (tiny sizes). Nothing is written back: autosave is off and
the server refuses every save. The server, its kernels and the browser are shut down in
``finally`` blocks, and any kernel still alive afterwards is killed and reported.

Chromium is the Debian package (``/usr/bin/chromium``; ``make browser`` installs it), driven by
Playwright's Python API with ``executable_path`` — never a downloaded browser. Without it the test
skips and says why.
"""

import json
import re
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from amp_edu.course.lessons import LESSONS
from cellgraph import browser_cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")

OPEN_TIMEOUT_S = 120           # a notebook open with its kernel idle
LESSON_TIMEOUT_S = 300         # Run All on one lesson (smoke sizes, on a busy machine)
SLIDER_TIMEOUT_S = 60          # the widget redrawing after one slider move
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _why_not() -> str | None:
    if not CHROMIUM.exists():
        return (f"Chromium is not installed at {CHROMIUM}: `make browser` installs it with apt-get "
                "(as root, on Debian/Ubuntu)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (the Python package) is not installed: `make install`"
    if sys.platform == "win32":
        return "make lab is a POSIX Makefile target"
    return None


pytestmark = [pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]

@pytest.fixture(scope="module")
def page(lab, tmp_path_factory):
    """Headless Chromium on the session's one JupyterLab server (``lab`` in conftest.py)."""
    from playwright.sync_api import sync_playwright
    profile = tmp_path_factory.mktemp("chromium-profile")      # a fresh --user-data-dir
    pw = sync_playwright().start()
    try:
        ctx = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROME_ARGS,
            viewport={"width": 1400, "height": 1000}, timeout=60_000)
        try:
            pg = ctx.pages[0] if ctx.pages else ctx.new_page()
            pg.set_default_timeout(30_000)
            yield pg
        finally:
            ctx.close()
    finally:
        pw.stop()


# --- in the page ------------------------------------------------------------------------------
_STATE = """(path) => {
  const app = window.jupyterapp;
  const w = app && app.shell.currentWidget;
  if (!w || !w.context || w.context.path !== path || !w.content || !w.content.model) return null;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = [];
  const model = w.content.model.cells;
  for (let i = 0; i < model.length; i++) {
    const m = model.get(i);
    if (m.type !== 'code') continue;
    const outs = [];
    for (let j = 0; j < m.outputs.length; j++) {
      const o = m.outputs.get(j).toJSON();
      outs.push({type: o.output_type, mimes: Object.keys(o.data || {}),
                 error: o.output_type === 'error' ? `${o.ename}: ${o.evalue}` : null,
                 text: typeof o.text === 'string' ? o.text : (o.text || []).join('')});
    }
    cells.push({index: i, count: m.executionCount, outputs: outs, empty: !m.sharedModel.getSource().trim()});
  }
  const node = w.node;
  const prompts = [...node.querySelectorAll('.jp-Cell')].map((c, i) => [i, c.querySelector('.jp-InputPrompt')]);
  const queued = prompts.filter(([i, p]) => p && p.textContent.includes('*')).map(([i, p]) => i);
  const pending = queued.length;
  // a displayed widget renders as an output whose child is the widget's view
  const widgets = [...node.querySelectorAll('.jp-OutputArea-output')].filter(
      e => e.firstElementChild && e.firstElementChild.classList.contains('jupyter-widgets'));
  const rendered = widgets.filter(e => !e.textContent.includes('Error displaying widget')).length;
  const outText = [...node.querySelectorAll('.jp-OutputArea')].map(e => e.innerText).join('\\n');
  return {status: kernel ? kernel.status : 'none', cells, pending, queued, widgetViews: widgets.length, rendered,
          errorDisplaying: outText.includes('Error displaying widget'),
          traceback: outText.includes('Traceback (most recent call last)')};
}"""

_SLIDERS = """() => {
  const node = window.jupyterapp.shell.currentWidget.node;
  return [...node.querySelectorAll('.widget-slider')].map((s, k) => {
    const h = s.querySelector('.noUi-handle');
    const label = s.querySelector('.widget-label');
    const r = s.getBoundingClientRect();
    return {k, label: label ? label.textContent.trim() : '', handle: !!h,
            visible: r.width > 0 && r.height > 0,
            now: h ? h.getAttribute('aria-valuenow') : null, max: h ? h.getAttribute('aria-valuemax') : null};
  });
}"""

# What the widget holding slider k shows: every image and the text of its output area, without
# the sliders' own readouts and labels.
_SHOWN = """(k) => {
  const node = window.jupyterapp.shell.currentWidget.node;
  const s = node.querySelectorAll('.widget-slider')[k];
  const area = s.closest('.jp-Cell-outputArea') || s.closest('.jp-OutputArea');
  const imgs = [...area.querySelectorAll('img')].map(i => i.src);
  const clone = area.cloneNode(true);
  clone.querySelectorAll('.widget-slider, .widget-readout, .widget-label, input, select').forEach(e => e.remove());
  return JSON.stringify([imgs, clone.textContent]);
}"""


def _wait(fn, timeout_s, what, poll_s=0.5):
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


def _state(page, lesson):
    return page.evaluate(_STATE, lesson.notebook)


def _open(page, lab, lesson):
    base, token = lab
    page.goto(f"{base}/lab/tree/{lesson.notebook}?reset&token={token}", wait_until="domcontentloaded")
    _wait(lambda: (s := _state(page, lesson)) and s["status"] == "idle" and s, OPEN_TIMEOUT_S,
          f"{lesson.notebook} to open with an idle kernel")


# Clear every output, then run the given notebook cells one at a time ("notebook:run-cell" runs the
# active cell and resolves when it has run); window.__ampRun says when the loop is done.
_RUN_CELLS = """(indices) => {
  const app = window.jupyterapp;
  const nb = app.shell.currentWidget.content;
  window.__ampRun = {done: false, error: null};
  (async () => {
    try {
      await app.commands.execute('notebook:clear-all-cell-outputs');
      for (const i of indices) {
        nb.activeCellIndex = i;
        nb.deselectAll();
        await app.commands.execute('notebook:run-cell');
      }
    } catch (e) { window.__ampRun.error = String(e); }
    window.__ampRun.done = true;
  })();
  return true;
}"""


def _run_cells(page, lesson, cells):
    """Run ``cells`` (notebook cell indices) in order; wait until the loop is done, the kernel is
    idle and nothing is queued, in two polls in a row."""
    page.evaluate(_RUN_CELLS, cells)
    t0 = time.monotonic()
    previous = None
    while True:
        s = _state(page, lesson)
        run = page.evaluate("() => window.__ampRun")
        settled = run["done"] and s["status"] == "idle" and s["pending"] == 0
        if settled and previous:
            break
        previous = settled
        if time.monotonic() - t0 > LESSON_TIMEOUT_S:
            pytest.fail(f"running cells {cells} of {lesson.notebook} did not finish in {LESSON_TIMEOUT_S} s: "
                        f"kernel {s['status']}, cells queued or running {s['queued'][:5]}")
        time.sleep(0.3)
    assert run["error"] is None, f"JupyterLab refused to run the cells: {run['error']}"
    print(f"\n{lesson.stem}: {len(cells)} cells ran in {time.monotonic() - t0:.0f} s", flush=True)
    return s


def _notebook_indices(lesson) -> list[int]:
    """:func:`cellgraph.browser_cells` (code-cell numbers) as indices among all the notebook's cells."""
    nb = json.loads((ROOT / lesson.notebook).read_text())
    code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    return [code[k] for k in browser_cells(nb)]


def _close_kernels(lab):
    base, token = lab
    kernels = json.loads(urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10).read())
    for k in kernels:
        req = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).read()


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.stem)
def test_lesson_runs_and_its_widgets_respond(lab, page, lesson):
    try:
        cells = _notebook_indices(lesson)
        _open(page, lab, lesson)
        state = _run_cells(page, lesson, cells)
        errors = [(c["index"], o["error"]) for c in state["cells"] for o in c["outputs"] if o["error"]]
        assert not errors, f"cells raised: {errors}"
        ran = {c["index"] for c in state["cells"] if c["count"] is not None}
        assert ran == set(cells), f"cells {sorted(set(cells) - ran)} did not run, {sorted(ran - set(cells))} ran unasked"
        printed = [c["index"] for c in state["cells"] for o in c["outputs"]
                   if "Traceback (most recent call last)" in o["text"]]
        assert not printed and not state["traceback"], f"cells print a traceback: {printed}"
        wanted = sum("application/vnd.jupyter.widget-view+json" in o["mimes"]
                     for c in state["cells"] for o in c["outputs"])
        assert wanted > 0, "the cells run displayed no widget"
        assert not state["errorDisplaying"], "'Error displaying widget' in an output"
        assert state["widgetViews"] >= wanted and state["rendered"] == state["widgetViews"], (
            f"{wanted} widgets displayed, {state['widgetViews']} widget outputs in the page, "
            f"{state['rendered']} rendered as widgets")
        _move_every_slider(page, lesson)
    finally:
        _close_kernels(lab)


def _move_every_slider(page, lesson):
    sliders = page.evaluate(_SLIDERS)
    stuck, hidden = [], [s["label"] or f"#{s['k']}" for s in sliders if not (s["visible"] and s["handle"])]
    assert not hidden, f"sliders that cannot be moved (hidden, or not a slider handle): {hidden}"
    for s in sliders:
        before = page.evaluate(_SHOWN, s["k"])
        handle = page.locator(".widget-slider").nth(s["k"]).locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        at_max = s["now"] is not None and s["max"] is not None and float(s["now"]) >= float(s["max"])
        handle.press("ArrowLeft" if at_max else "ArrowRight")
        deadline = time.monotonic() + SLIDER_TIMEOUT_S
        while page.evaluate(_SHOWN, s["k"]) == before and time.monotonic() < deadline:
            time.sleep(0.25)
        if page.evaluate(_SHOWN, s["k"]) == before:
            stuck.append(s["label"] or f"#{s['k']}")
    state = _state(page, lesson)
    assert not state["traceback"] and not state["errorDisplaying"], "a slider move printed a traceback"
    assert not stuck, f"{lesson.stem}: moving these sliders changed nothing the widget shows: {stuck}"
    print(f"{lesson.stem}: {len(sliders)} sliders moved, each changed its widget", flush=True)


def test_without_chromium_the_skip_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", Path("/nonexistent/chromium"))
    reason = _why_not()
    assert reason and "make browser" in reason and "apt-get" in reason
