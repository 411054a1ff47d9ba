# shellcheck shell=bash
# Source this file (`source scripts/env.sh`) to get a shell where plain
# `cargo build/test/run` work: it installs the pinned libtorch (PyPI
# torch==2.13.0) into a cache outside the repository when it is missing, then
# exports LIBTORCH and LD_LIBRARY_PATH. Quiet when everything is in place.
#
#   VRAMPROBE_CACHE     cache folder (default: ~/.cache/vramprobe)
#   VRAMPROBE_LIBTORCH  use an existing PyTorch 2.13 installation instead: the
#                       `torch` package folder (python -c 'import torch,os;
#                       print(os.path.dirname(torch.__file__))')
#   VRAMPROBE_PYTHON    python used to create the cache's virtualenv (python3)

VRAMPROBE_TORCH_VERSION="${VRAMPROBE_TORCH_VERSION:-2.13.0}"
_vp_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_vp_fail() {
  echo "vramprobe bootstrap: $*" >&2
  return 1
}

_vp_torch_version_of() {
  # Reads the version a torch folder's headers declare, e.g. 2.13.0.
  local h="$1/include/torch/headeronly/version.h"
  [ -f "$h" ] || h="$1/include/torch/csrc/api/include/torch/version.h"
  [ -f "$h" ] || return 1
  awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$h"
}

_vp_install_torch() {
  local venv="$1" py="${VRAMPROBE_PYTHON:-python3}" avail_kb
  command -v "$py" >/dev/null 2>&1 || _vp_fail "$py not found: it is needed once to install torch==$VRAMPROBE_TORCH_VERSION (or set VRAMPROBE_LIBTORCH to an existing PyTorch $VRAMPROBE_TORCH_VERSION)" || return 1
  # The cache is the user's own (mode 0700): vramprobe refuses to run its hook from one others can write to.
  { mkdir -p "$(dirname "$(dirname "$venv")")" && mkdir -p -m 700 "$(dirname "$venv")"; } || _vp_fail "cannot create the cache folder $(dirname "$venv")" || return 1
  avail_kb=$(df -Pk "$(dirname "$venv")" | awk 'NR==2 {print $4}')
  if [ -n "$avail_kb" ] && [ "$avail_kb" -lt 6000000 ]; then
    _vp_fail "only $((avail_kb / 1024)) MiB free under $(dirname "$venv"); torch==$VRAMPROBE_TORCH_VERSION needs about 5 GiB (set VRAMPROBE_CACHE elsewhere)"
    return 1
  fi
  echo "vramprobe bootstrap: downloading torch==$VRAMPROBE_TORCH_VERSION from PyPI (libtorch with its CUDA libraries, about 4.7 GB installed; it runs without a GPU too) into $venv" >&2
  echo "vramprobe bootstrap: this happens once and takes about 2 minutes; later runs and the tests reuse it" >&2
  rm -rf "$venv"
  "$py" -m venv "$venv" || _vp_fail "could not create a virtualenv at $venv (is python3-venv installed?)" || return 1
  local log="$venv/install.log" start=$SECONDS status=0
  if [ -t 2 ]; then
    # On a terminal, pip's own progress bars show the download.
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
      "torch==$VRAMPROBE_TORCH_VERSION" 2>&1 | tee "$log" >&2 || status=$?
  else
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --progress-bar off \
      "torch==$VRAMPROBE_TORCH_VERSION" >"$log" 2>&1 || status=$?
  fi
  if [ "$status" -ne 0 ]; then
    tail -n 5 "$log" >&2
    _vp_fail "pip could not install torch==$VRAMPROBE_TORCH_VERSION (registry unreachable or disk full?); full log: $log"
    return 1
  fi
  touch "$venv/.complete"
  echo "vramprobe bootstrap: torch installed in $((SECONDS - start)) s ($(du -sh "$venv" 2>/dev/null | cut -f1) in $venv)" >&2
}

# Builds vramprobe in the given profile. The first build compiles about 200
# crates and the C++ shim: it says so and shows cargo's progress; later
# builds are incremental and quiet.
vramprobe_build() {
  local profile="${1:-release}" target="${CARGO_TARGET_DIR:-$_vp_root/target}"
  if [ -x "$target/$profile/vramprobe" ]; then
    cargo build --profile "$profile" --features builtin --quiet --manifest-path "$_vp_root/Cargo.toml"
  else
    echo "vramprobe: building vramprobe ($profile, about 2 minutes on 2 cores the first time) into $target" >&2
    cargo build --profile "$profile" --features builtin --manifest-path "$_vp_root/Cargo.toml"
  fi
}

vramprobe_bootstrap() {
  local torch_dir
  if [ -n "${VRAMPROBE_LIBTORCH:-}" ]; then
    torch_dir="$VRAMPROBE_LIBTORCH"
    [ -d "$torch_dir/lib" ] && [ -d "$torch_dir/include" ] ||
      _vp_fail "VRAMPROBE_LIBTORCH=$torch_dir has no lib/ and include/ (point it at the installed 'torch' package folder)" || return 1
  else
    local cache="${VRAMPROBE_CACHE:-$HOME/.cache/vramprobe}"
    local venv="$cache/torch-$VRAMPROBE_TORCH_VERSION"
    if [ ! -f "$venv/.complete" ]; then
      _vp_install_torch "$venv" || return 1
    fi
    torch_dir=$(echo "$venv"/lib/python3*/site-packages/torch)
    [ -d "$torch_dir/lib" ] || _vp_fail "the cached install at $venv has no torch package; delete $venv and retry" || return 1
  fi
  local found
  found=$(_vp_torch_version_of "$torch_dir")
  [ "$found" = "$VRAMPROBE_TORCH_VERSION" ] ||
    _vp_fail "$torch_dir is torch ${found:-of unknown version}; this build needs $VRAMPROBE_TORCH_VERSION (tch 0.26)" || return 1
  export LIBTORCH="$torch_dir"
  export LIBTORCH_CXX11_ABI=1
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$torch_dir/lib:"*) ;;
    *) export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

vramprobe_bootstrap
