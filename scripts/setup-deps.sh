#!/usr/bin/env bash
# Installs what graft needs on a fresh Debian machine, only what is missing:
# Debian: cmake, a C compiler, protobuf-c (ONNX frontend), clang's runtime (libFuzzer);
# Python: numpy, onnx (tests' independent oracle), pytest.
set -euo pipefail

need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake gcc clang libprotobuf-c-dev protobuf-c-compiler libclang-rt-14-dev python3-pip; do
  have_pkg "$p" || need_apt+=("$p")
done
# python3-pip is only needed when pip itself is missing
if command -v pip3 >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1; then
  need_apt=("${need_apt[@]/python3-pip}")
fi
pkgs=()
for p in "${need_apt[@]}"; do [ -n "$p" ] && pkgs+=("$p"); done
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${pkgs[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

missing_py=()
python3 -c "import numpy" 2>/dev/null || missing_py+=(numpy)
python3 -c "import onnx" 2>/dev/null || missing_py+=(onnx)
python3 -c "import pytest" 2>/dev/null || missing_py+=(pytest)
if [ ${#missing_py[@]} -gt 0 ]; then
  echo "setup: installing Python packages: ${missing_py[*]}"
  python3 -m pip install -q "${missing_py[@]}" 2>/dev/null || python3 -m pip install -q --break-system-packages "${missing_py[@]}"
fi
echo "setup: dependencies present"
