#!/usr/bin/env bash
# Set up everything pytest-gpuperf needs on a fresh machine, idempotently:
#   - a virtual environment in .venv (override with VENV=...)
#   - torch (TORCH_SPEC, default torch==2.13.0; a CPU build where the machine provides one)
#   - the project itself, editable, with its dev extras (ruff, pytest-xdist, wgpu, matplotlib)
#   - Mesa's lavapipe Vulkan driver (a real Vulkan device on the CPU) when apt-get is available as root
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PYTHON=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
fi
"$VENV/bin/python" -m pip install -q -e ".[dev]"

if ! ldconfig -p 2>/dev/null | grep -q libvulkan_lvp && [ ! -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] \
   && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers libvulkan1) \
    >/dev/null 2>&1 || echo "bootstrap: could not install mesa-vulkan-drivers; Vulkan tests will skip" >&2
fi
echo "bootstrap: ready ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
