# amp_edu — the course's commands. Every target creates .venv first if it is missing.
#   make lab                       open the course in JupyterLab
#   make test                      run every test, in two tiers: test-fast, then test-course
#                                  (which test is in which tier: COURSE_TIER in tests/tiers.py)
#   make test-fast                 the library's unit tests (pytest -m "not slow"; ~2.5 min here)
#   make test-course               the course tier (pytest -m slow): nbval over lessons and
#                                  solutions, grading kernels, JupyterLab, the lessons in Chromium;
#                                  its test files on COURSE_JOBS workers (pytest-xdist, whole files);
#                                  installs bubblewrap and Chromium with apt-get when run as root
#   make readme                    regenerate README.md's lesson table from amp_edu/course/lessons.py
#   make sandbox                   install bubblewrap, the grader's sandbox (apt-get, as root)
#   make browser                   install Chromium for that browser test (apt-get, as root)
#   make exercises                 regenerate exercises/ from solutions/
#   make grade NB=FILE|FOLDER [ARGS="--jobs 2 --csv grades.csv"]   grade a notebook or a class
#   make doctor / make bench       what this machine can do / the benchmark
#   make gpu-check [GPU_CHECK_ARGS=--dry-run]   on a CUDA machine: every lesson under nbval and stored
#                                  executed (build/gpu/notebooks), parity tests, bench, environment.json (<= 9 min)
#   make site                      the course as a static website (build/site/html), every asset local
#   make test-compat [COMPAT_TORCH=2.14.1]   the hosted-runtime install and the fast tier + lessons
#                                  04 05 10 12 13 on another torch, in a second environment (several GB)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Extra pip arguments, e.g. PIP_ARGS="--extra-index-url <a PyTorch CUDA index>" (see README).
PIP_ARGS ?=
LAB_ARGS ?=
# The course tier waits on kernels, servers, ranks and a browser much of the time: two workers, each
# taking whole test files (--dist loadfile keeps a notebook's cells in order on one kernel).
# COURSE_JOBS=0 runs it in one process.
COURSE_JOBS ?= 2

.PHONY: install lab test test-fast test-course readme browser sandbox exercises grade doctor bench gpu-check site test-compat clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt $(PIP_ARGS) -e '.[test]'
	touch $(STAMP)

# JupyterLab refuses to run as root without --allow-root, and tries to open a browser;
# both are decided here. JUPYTER_PORT / JUPYTER_TOKEN are read by JupyterLab itself.
lab: install
	$(PY) -m jupyterlab --ServerApp.root_dir="$(CURDIR)" \
	  --LabApp.default_url=/lab/tree/notebooks/00_setup.ipynb \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root ) \
	  $$( $(PY) -c "import webbrowser,sys; webbrowser.get()" >/dev/null 2>&1 || echo --no-browser ) \
	  $(LAB_ARGS)

test: test-fast test-course

test-fast: install
	AMP_EDU_SMOKE=1 $(PY) -m pytest -m "not slow"

test-course: install browser sandbox
	AMP_EDU_SMOKE=1 $(PY) -m pytest -m slow --durations=25 \
	  $$( [ "$(COURSE_JOBS)" -gt 0 ] && echo "-n $(COURSE_JOBS) --dist loadfile" )

readme: install
	$(PY) -m amp_edu.course.lessons --write

# A system tool the tests need, from Debian's packages: $(call apt_tool,COMMAND,PACKAGE,WHY,WITHOUT)
# installs PACKAGE with apt-get when COMMAND is missing and we are root (else says WITHOUT); a failed
# install does not stop `make test`.
define apt_tool
	@if command -v $(1) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make $@: installing $(2) with apt-get ($(3))"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; } \
	    || echo "make $@: apt-get could not install $(2): $(4)"; \
	else \
	  echo "make $@: $(1) is missing and cannot be installed here (needs root and apt-get): $(4)"; \
	fi
endef

# tests/course/test_browser.py opens every lesson in the Debian package's Chromium (never a downloaded browser).
browser:
	$(call apt_tool,chromium,chromium,for tests/course/test_browser.py,tests/course/test_browser.py will skip)

# `python -m amp_edu grade` runs each learner kernel inside bubblewrap (bwrap) when it can; without it
# grading warns and runs kernels unsandboxed, and the sandbox tests skip.
sandbox:
	$(call apt_tool,bwrap,bubblewrap,the grader's sandbox,grading will run kernels unsandboxed with a warning)

exercises: install
	$(PY) -m amp_edu exercises

# NB: a notebook or a folder of submissions; ARGS: more options, e.g. ARGS="--jobs 2 --csv grades.csv"
# (python -m amp_edu grade --help lists them).
grade: install
	@test -n "$(NB)" || { echo 'usage: make grade NB=exercises/NN_name.ipynb|FOLDER [ARGS="--jobs 2 --csv grades.csv"]'; exit 2; }
	$(PY) -m amp_edu grade "$(NB)" $(ARGS)

doctor: install
	$(PY) -m amp_edu doctor

bench: install
	$(PY) -m amp_edu bench

# The course's GPU outputs in one command (tools/gpu_check.py); without CUDA it says what it skips.
GPU_CHECK_ARGS ?=
gpu-check: install
	$(PY) tools/gpu_check.py $(GPU_CHECK_ARGS)

# The site from the stored notebooks (nothing executed); MathJax comes from npm once (build/vendor/).
site: install
	$(PY) -m amp_edu.course.site

# A second environment with only torch $(COMPAT_TORCH), the hosted install cell run in it (torch must
# stay), then the test extra from constraints.txt less its torch pin; the fast tier and five lessons.
COMPAT_TORCH ?= 2.14.1
test-compat: install
	$(PY) tools/compat.py --torch $(COMPAT_TORCH)

clean:
	rm -rf $(VENV) build *.egg-info
