# sgeval — common tasks. Needs only Python 3.11 (or python3) with venv/pip; everything else is
# installed into .venv from the pinned requirements files.
#
#   make setup              create .venv, install requirements-dev.txt, sgeval itself (pip install -e .,
#                           module and console script) and the test-only sgbench (redone only when the
#                           requirements files or pyproject.toml change)
#   make demo               make the synthetic demo data (if missing), evaluate configs/demo.yaml (Model A) and
#                           Model B, and write their report: demo/report.md (every table) and demo/plots/
#   make figures            regenerate the README's table and figure (docs/) from the demo
#   make demo-vg            the Visual Genome path on generated VG150-layout files (demo/vg): the converters
#                           vg150, zeroshot and sgb (PredCls), then configs/vg150-demo.yaml
#   make demo-oi            the Open Images path on generated PySGG-layout files (demo/oi): the converters
#                           openimages-gt and openimages, then configs/oiv6-demo.yaml (protocol oi beside sgb and
#                           the fair protocols)
#   make demo-ag            the Action Genome path on generated AG-layout files (demo/ag): the converters ag-gt
#                           and ag (SGDet, attention logits), then configs/ag-demo.yaml (protocol ag: STTran's with /
#                           semi / no constraint, both mean recalls, beside the fair protocols and IMR)
#   make test               run the test suite (with the service's browser tests in headless chromium) in
#                           TEST_WORKERS=2 processes
#   make serve              the benchmark service on the demo data at http://127.0.0.1:8000/ (PORT=...): queues
#                           the demo's two models once, then serves (configs/serve/demo.yaml; state in serve-state/)
#   make eval MODEL=<name>  evaluate configs/<name>.yaml; when configs/convert/<name>.yaml (its conversion
#                           recipe) exists, first convert the raw model output it names into the config's
#                           pred (if that is missing or stale, sgeval_convert/README.md).
#                           Paths can be overridden: RAW=<raw output> GT=<psg.json> GT_SEG=<panoptic root>
#                           PRED=<converted .zip> OUTPUT=<metrics .json>; WORKERS=<n> for both steps
#   make bench              time sgeval (GT prepared and cold) against SGBench 1.0 and the library floor on three
#                           PSG-sized workloads of 2,177 images (default, overlap-heavy, blob; QUICK=1: 200; RUNS=3;
#                           WORKLOAD=default|overlap|blob|both|all), then Evaluator.update in a test loop and its
#                           state's size (bench/loop.py; LOOP=0: not); every target with ok / MISSED; then VG150
#                           at full size in box mode (bench/vg150_full.py; QUICK=1: 500 images; VG150=0: not; its
#                           first run generates 26,446 images: about 45 min on 2 cores)
#   make bench-convert      convert generated Pair-Net-like pickles of 1 and 30 GB (GB=1,30) with 1 and 2 workers:
#                           time, MB/s against the disk's dd speed, peak RSS, identical outputs (bench/convert_bench.py)
#   make bench-serve        the benchmark service under load on loopback: the real server on the demo benchmark,
#                           50 uploads and 1,000 leaderboard reads from 32 threads at once (UPLOADS=50 READS=1000
#                           RUNS=3): p50/p95/max latencies and the time until the queue drained (bench/serve_load.py)
#   make bench-serve-hostile
#                           the service under each attack of issue 29 on loopback (ATTACK_S=10 seconds each): the
#                           server's peak RSS and a legitimate upload's latency meanwhile (bench/serve_hostile.py)
#   make fuzz               a campaign of generated bad inputs against every reader (FUZZ_S=600 seconds; fuzz/)
#   make check-openpsg OPENPSG=<path>
#                           run OpenPSG's own evaluation code (from an OpenPSG git checkout or mirror, pinned commit)
#                           on generated raw outputs, rewrite tests/data/openpsg/*.zip with its numbers and check that
#                           sgeval's openpsg protocol gives them (tools/openpsg_check/README.md; not part of make test)
#   make check-sgb SGB=<path>
#                           the same for the sgb protocol: Scene-Graph-Benchmark.pytorch's own VG evaluation (pinned
#                           commit) on generated data in sgdet, sgcls and predcls; rewrites tests/data/sgb/*.zip
#                           (tools/sgb_check/README.md; not part of make test)
#   make check-oi PYSGG=<path>
#                           the same for PySGG's Open Images evaluation (pinned commit: oi_evaluation, its AP and
#                           recall and the classic recall it prints) on generated OI data in sgdet, sgcls and
#                           predcls; rewrites tests/data/oi/*.zip (tools/oi_check/README.md; not part of make test)
#   make check-pq OPENPSG=<path> PANOPTICAPI=<path> FAIR_PSGG=<path>
#                           panoptic quality: panopticapi's pq_compute, OpenPSG's evaluate(metric=['PQ']) through
#                           mmdet 2.20.0, and fair-psgg's two mask merges (pinned commits, unmodified) on generated
#                           PSG data; rewrites tests/data/pq/*.zip and checks tests/reference_pq.py against them
#                           (tools/pq_check/README.md; not part of make test)
#   make check-ag STTRAN=<path> TEMPURA=<path> DSGDETR=<path>
#                           the Action Genome evaluation code of STTran, TEMPURA and DSG-DETR (pinned commits:
#                           dataloader/action_genome.py, lib/evaluation_recall.py) on generated AG data in predcls,
#                           sgcls and sgdet; rewrites tests/data/ag/*.zip and checks the AG converters and the
#                           plain-Python reference against them (tools/ag_check/README.md; not part of make test)
#   make clean / distclean  remove generated files / also .venv

SHELL := /bin/sh
PYTHON_BOOT := $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_CPU := 2.13.0+cpu
DEMO := demo/data
DEMO_SOURCES := tools/synth.py tools/make_demo.py

.PHONY: setup browser serve demo demo-data demo-vg demo-oi demo-ag figures test eval bench bench-convert bench-serve bench-serve-hostile fuzz check-openpsg check-sgb check-oi check-pq check-ag clean distclean

setup: $(STAMP) browser

# The browser tests (tests/serve/test_serve_browser.py) drive Debian's chromium through its chromedriver:
# installed with apt where missing (as root, or with sudo).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "make setup: chromium and chromedriver are missing and apt-get is not here: install them" >&2; exit 1; \
	  fi; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "installing Debian's chromium and chromium-driver with apt"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver >/dev/null; \
	fi

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@if [ -z "$(PYTHON_BOOT)" ]; then echo "make setup: neither python3.11 nor python3 found" >&2; exit 1; fi
	@if [ ! -x $(PY) ]; then echo "creating $(VENV) with $(PYTHON_BOOT)"; $(PYTHON_BOOT) -m venv $(VENV); fi
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -e .
# Test-only: tests/oracles/test_sgbench.py checks sgeval against SGBench 1.0 (sgeval.py never imports it).
# --no-deps: sgbench 1.0.0 declares numpy<2, but its code runs on the pinned numpy 2.x above.
	$(PY) -m pip install --disable-pip-version-check -q --no-deps sgbench==1.0.0
# Test-only: tests/core/test_evaluator_distributed.py runs Evaluator.sync in real torch.distributed (gloo) ranks.
# torch's CPU build is installed only where pip finds its wheel on the machine (find-links): the index would serve a
# CUDA build of several GB. Elsewhere that test is skipped (tests/core/test_evaluator.py checks sync with a stand-in).
	@if $(PY) -m pip install -q --dry-run --no-index --no-deps 'torch==$(TORCH_CPU)' >/dev/null 2>&1; then \
	  echo "installing torch $(TORCH_CPU) (the CPU build on this machine) for the distributed test"; \
	  $(PY) -m pip install --disable-pip-version-check -q 'torch==$(TORCH_CPU)'; fi
	@touch $@

# (Re)generate the demo data when a file is missing or the generator changed.
demo-data: $(STAMP)
	@if [ ! -f $(DEMO)/psg.json ] || [ ! -f $(DEMO)/pred.zip ] || [ ! -f $(DEMO)/pred-b.zip ] \
	    || [ tools/synth.py -nt $(DEMO)/pred.zip ] || [ tools/make_demo.py -nt $(DEMO)/pred.zip ] \
	    || [ sgeval.py -nt $(DEMO)/pred.zip ]; then \
	  rm -rf $(DEMO) && $(PY) -m tools.make_demo --out $(DEMO); \
	fi

demo: demo-data
	$(PY) sgeval.py --config configs/demo.yaml
	$(PY) sgeval.py --config configs/demo.yaml --quiet --pred $(DEMO)/pred-b.zip --model "Model B" \
	  --output demo/results-b.json > /dev/null
	$(PY) sgeval.py report demo/results.json demo/results-b.json --tables all --output demo/report.md \
	  --plots demo/plots --plot-formats png,pdf
	@echo "report: demo/report.md; figures: demo/plots/"

# The README's table (between its demo-table markers; tests/core/test_report.py checks it) and figure
# (docs/protocols.png), from the demo's two models.
figures: demo
	$(PY) -m tools.make_figures

SERVE := $(PY) -m sgeval_serve --config configs/serve/demo.yaml
serve: demo-data
	$(SERVE) submit $(DEMO)/pred.zip --benchmark psg-demo --user sgeval-demo --method "Model A" --approve --if-new
	$(SERVE) submit $(DEMO)/pred-b.zip --benchmark psg-demo --user sgeval-demo --method "Model B" --if-new
	@echo "an admin token: $(SERVE) token <name> --admin   (or sign up on the page)"
	$(SERVE) $(if $(PORT),--port $(PORT))

demo-vg: $(STAMP)
	rm -rf demo/vg && $(PY) -m tools.make_vg_demo --out demo/vg
	$(PY) sgeval.py --config configs/vg150-demo.yaml

demo-oi: $(STAMP)
	rm -rf demo/oi && $(PY) -m tools.make_oi_demo --out demo/oi
	$(PY) sgeval.py --config configs/oiv6-demo.yaml

demo-ag: $(STAMP)
	rm -rf demo/ag && $(PY) -m tools.make_ag_demo --out demo/ag
	$(PY) sgeval.py --config configs/ag-demo.yaml

# TEST_WORKERS processes (pytest-xdist), a test file's tests in one of them (their module fixtures made once).
TEST_WORKERS ?= 2
test: $(STAMP) browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

# Fuzz campaign: generated bad inputs for every reader (fuzz/), FUZZ_S seconds; non-clean cases go to fuzz/corpus/.
FUZZ_S ?= 600
fuzz: $(STAMP)
	$(PY) -m fuzz --seconds $(FUZZ_S)

# make eval overrides, passed to both the conversion step and the evaluation.
EVAL_PATHS = $(if $(GT),--gt "$(GT)") $(if $(PRED),--pred "$(PRED)")

eval: $(STAMP)
	@if [ -z "$(MODEL)" ]; then \
	  echo "usage: make eval MODEL=<name>   (evaluates configs/<name>.yaml)" >&2; exit 2; fi
	@if [ ! -f "configs/$(MODEL).yaml" ]; then \
	  echo "make eval: configs/$(MODEL).yaml does not exist; available:" $$(ls configs | sed -n 's/\.yaml$$//p') >&2; \
	  exit 2; fi
	$(PY) sgeval.py convert --config "configs/$(MODEL).yaml" $(if $(RAW),--raw "$(RAW)") $(EVAL_PATHS) \
	  $(if $(WORKERS),--workers $(WORKERS))
	$(PY) sgeval.py --config "configs/$(MODEL).yaml" $(EVAL_PATHS) $(if $(GT_SEG),--gt-seg "$(GT_SEG)") \
	  $(if $(OUTPUT),--output "$(OUTPUT)") $(if $(WORKERS),--workers $(WORKERS))

# Benchmark (bench/README.md): sgeval against SGBench 1.0 (own venv, bench/.venv-sgbench) and the
# library floor, on three PSG-scale workloads generated once into bench/data/. Not part of `make test`.
RUNS ?= 3
QUICK ?=
WORKLOAD ?= all
LOOP ?= 1
VG150 ?= 1
bench: $(STAMP)
	$(PY) bench/run.py --runs $(RUNS) --workload $(WORKLOAD) $(if $(filter-out 0,$(QUICK)),--quick) \
	  $(if $(filter 0,$(LOOP)),--no-loop)
	$(if $(filter 0,$(VG150)),,$(PY) -m bench.vg150_full --runs $(RUNS) $(if $(filter-out 0,$(QUICK)),--images 500))

# Converting a generated Pair-Net-like results pickle of GB gigabytes (1 and 30 by default) with 1 and 2 workers.
GB ?= 1,30
bench-convert: $(STAMP)
	$(PY) -m bench.convert_bench --gb $(GB)

# The benchmark service under load (bench/serve_load.py): a fresh server and state folder per run, RUNS runs.
UPLOADS ?= 50
READS ?= 1000
bench-serve: $(STAMP)
	$(PY) -m bench.serve_load --uploads $(UPLOADS) --reads $(READS) --runs $(RUNS)

# The service under the attacks of issue 29 (bench/serve_hostile.py): peak RSS, a legitimate upload's latency.
ATTACK_S ?= 10
bench-serve-hostile: $(STAMP)
	$(PY) -m bench.serve_hostile --seconds $(ATTACK_S)

# OpenPSG's own evaluator as the oracle of the openpsg protocol (tools/openpsg_check/): its own venv, mmdet's
# and OpenPSG's sources in tools/openpsg_check/build/; regenerates the fixtures of tests/oracles/test_openpsg_oracle.py.
check-openpsg: $(STAMP)
	@if [ -z "$(OPENPSG)" ]; then \
	  echo "usage: make check-openpsg OPENPSG=<path>   (an OpenPSG git checkout or mirror holding commit" \
	       "34b2a892f7441966265e3d60ad01ee8eeae89041, e.g. git clone https://github.com/Jingkang50/OpenPSG)" >&2; \
	  exit 2; fi
	OPENPSG="$(OPENPSG)" PYTHON="$(PYTHON_BOOT)" SGEVAL_PYTHON=$(PY) tools/openpsg_check/run.sh

# Scene-Graph-Benchmark's own evaluator as the oracle of the sgb protocol (tools/sgb_check/): its own venv and
# SGB's sources in tools/sgb_check/build/; regenerates the fixtures of tests/oracles/test_sgb_oracle.py.
check-sgb: $(STAMP)
	@if [ -z "$(SGB)" ]; then \
	  echo "usage: make check-sgb SGB=<path>   (a Scene-Graph-Benchmark.pytorch git checkout or mirror holding commit" \
	       "6f75881ad6076d3a1aee34e9bead2b3595631086, e.g. git clone https://github.com/KaihuaTang/Scene-Graph-Benchmark.pytorch)" >&2; \
	  exit 2; fi
	SGB="$(SGB)" PYTHON="$(PYTHON_BOOT)" SGEVAL_PYTHON=$(PY) tools/sgb_check/run.sh

# PySGG's own Open Images evaluation as the oracle of the oi protocol (tools/oi_check/): its own venv and
# PySGG's sources in tools/oi_check/build/; regenerates the fixtures of tests/oracles/test_oi_oracle.py.
check-oi: $(STAMP)
	@if [ -z "$(PYSGG)" ]; then \
	  echo "usage: make check-oi PYSGG=<path>   (a PySGG git checkout or mirror holding commit" \
	       "a63942a076932b3756a477cf8919c3b74cd36207, e.g. git clone https://github.com/SHTUPLUS/PySGG)" >&2; \
	  exit 2; fi
	PYSGG="$(PYSGG)" PYTHON="$(PYTHON_BOOT)" SGEVAL_PYTHON=$(PY) tools/oi_check/run.sh

# panopticapi, OpenPSG (mmdet 2.20.0) and fair-psgg as the oracles of panoptic quality (tools/pq_check/): its own
# venv and the tools' sources in tools/pq_check/build/; regenerates the fixtures of tests/oracles/test_pq_oracle.py.
check-pq: $(STAMP)
	@if [ -z "$(OPENPSG)" ] || [ -z "$(PANOPTICAPI)" ] || [ -z "$(FAIR_PSGG)" ]; then \
	  echo "usage: make check-pq OPENPSG=<path> PANOPTICAPI=<path> FAIR_PSGG=<path>   (git checkouts or mirrors" \
	       "holding OpenPSG 34b2a892f7441966265e3d60ad01ee8eeae89041, panopticapi" \
	       "7bb4655548f98f3fedc07bf37e9040a992b054b0 and fair-psgg fba4da3e456f6a2e11d760782a8ce2d94bd2e462;" \
	       "e.g. git clone https://github.com/cocodataset/panopticapi)" >&2; \
	  exit 2; fi
	OPENPSG="$(OPENPSG)" PANOPTICAPI="$(PANOPTICAPI)" FAIR_PSGG="$(FAIR_PSGG)" PYTHON="$(PYTHON_BOOT)" \
	  SGEVAL_PYTHON=$(PY) tools/pq_check/run.sh
# STTran's, TEMPURA's and DSG-DETR's own Action Genome evaluation as the oracle (tools/ag_check/): its own venv
# and the tools' sources in tools/ag_check/build/; regenerates the fixtures of tests/oracles/test_ag_oracle.py.
check-ag: $(STAMP)
	@if [ -z "$(STTRAN)" ] || [ -z "$(TEMPURA)" ] || [ -z "$(DSGDETR)" ]; then \
	  echo "usage: make check-ag STTRAN=<path> TEMPURA=<path> DSGDETR=<path>   (git checkouts or mirrors holding" \
	       "yrcong/STTran 6b559e13ae891db4da913378a4153ddb444d4875, sayaknag/unbiasedSGG" \
	       "976babd45f1d14f6d7386188e9265507cf0f07dc and Shengyu-Feng/DSG-DETR" \
	       "1d28dda0182e50e8938fdaf860f6ef4abcf9aaf0, e.g. git clone https://github.com/yrcong/STTran)" >&2; \
	  exit 2; fi
	STTRAN="$(STTRAN)" TEMPURA="$(TEMPURA)" DSGDETR="$(DSGDETR)" PYTHON="$(PYTHON_BOOT)" SGEVAL_PYTHON=$(PY) \
	  tools/ag_check/run.sh

clean:
	rm -rf $(DEMO) serve-state demo/vg demo/oi demo/ag demo/results.json demo/results-b.json demo/report.md demo/plots .pytest_cache
	find . -path ./$(VENV) -prune -o \( -name '*.nbi' -o -name '*.nbc' \) -exec rm -f {} +
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
