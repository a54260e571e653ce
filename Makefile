# Every target builds the local virtualenv itself: on a fresh machine `make run` and `make test`
# are the only two commands a user needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-loaded bench results lint fmt clean system-deps k8s-binaries lab lab-down image image-deps manifests reference docs protos

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian's prometheus (for the monitoring tests against a real server; the same package ships
# promtool) and chromium (report.html opened in a real headless browser). Best effort: the tests
# that need them skip with a clear reason where they cannot be installed (under CI they fail).
system-deps:
	@{ command -v prometheus && command -v promtool && command -v chromium; } >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus chromium >/dev/null) \
	  || echo "note: could not install prometheus and chromium; the tests that need them will skip"; }

# The tools `make image`, the image's live test and the lab's real node (`gpufleet lab up
# --real-node`: runc, the CNI plugins, gcc + libc6-dev for the static pause; its containerd 2.x
# comes from k8s-binaries) use (Debian packages; best effort like system-deps: without them those
# tests skip, or fail under CI).
IMAGE_DEBS := mmdebstrap umoci podman runc containernetworking-plugins gcc libc6-dev iproute2
image-deps:
	@{ command -v mmdebstrap && command -v umoci && command -v podman && command -v runc \
	   && command -v gcc && command -v ip && [ -x /usr/lib/cni/bridge ] \
	   && [ -f /usr/lib/x86_64-linux-gnu/libc.a -o -f /usr/lib/aarch64-linux-gnu/libc.a ]; } >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(IMAGE_DEBS) >/dev/null) \
	  || echo "note: could not install $(IMAGE_DEBS); the image and real-node tests will skip"; }

# gpufleet's container image, without Docker (deploy/image/build.sh): an OCI archive under
# ~/.cache/gpufleet/image, cached by content; its path is the last line printed.
image: $(STAMP) image-deps
	PYTHON=$(BIN)/python bash deploy/image/build.sh

# deploy/kubernetes/*.yaml from the chart (charts/gpufleet), with the helm k8s-binaries builds.
manifests: k8s-binaries
	bash deploy/kubernetes/generate.sh

# The real Kubernetes control plane for the live tests and `gpufleet lab` (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl from Go modules; kine; KWOK; helm; the kubelet
# and containerd 2.x for the lab's real node; the example DRA driver's kubelet plugin the real node
# runs in its live test). Cached outside the repo by version
# (~/.cache/gpufleet/k8s-<version>/bin): a no-op once built, tens of minutes on a fresh machine.
# Needs Go (PATH or /usr/local/go/bin).
k8s-binaries:
	bash deploy/testcluster/build.sh

# A local lab cluster with the default GPU fleet; prints the kubeconfig path last.
lab: $(STAMP) k8s-binaries
	$(BIN)/gpufleet lab up

lab-down: $(STAMP)
	$(BIN)/gpufleet lab down

run: $(STAMP)
	$(BIN)/gpufleet simulate

test: $(STAMP) system-deps image-deps k8s-binaries protos
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest

# The live suite with two CPU-bound processes beside it for the whole run, as on a loaded CI
# machine: every live wait is on a condition with a deadline sized for that. The hogs end with
# the suite (and after two hours whatever happens).
test-loaded: $(STAMP) system-deps image-deps k8s-binaries
	@pids=; for i in 1 2; do timeout 7200 sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	  trap 'kill $$pids 2>/dev/null' EXIT; \
	  $(BIN)/pytest -m live

# The documentation site (mkdocs, material theme) into site/; --strict fails on a broken link,
# anchor or a page missing from the nav (tests/test_docs_site.py runs the same build).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# README's results table and benchmarks/RESULTS.md: run every recorded benchmark (about an
# hour on 2 cores; the live ones start a lab) and render both from benchmarks/results/*.json
results: $(STAMP)
	$(BIN)/python benchmarks/results.py run --all
	$(BIN)/python benchmarks/results.py render

# The kubelet's gRPC stubs for `gpufleet node-plugin`, generated from the .proto files of the
# k8s.io/kubelet Go module (which k8s-binaries downloads) into ~/.cache/gpufleet/protos; the plugin
# generates them on first use too, this only does it ahead of the tests.
protos: $(STAMP) k8s-binaries
	$(BIN)/python -m gpufleet.node_plugin.protos

# docs/reference/ (CLI, configuration and its JSON Schemas, annotations, metrics) from the code;
# tests/test_reference_docs.py fails while a committed page differs from what this writes.
reference: $(STAMP)
	$(BIN)/python -m gpufleet.reference

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format src tests benchmarks

clean:
	-[ -x $(BIN)/gpufleet ] && $(BIN)/gpufleet lab down
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache out .gpufleet-lab
