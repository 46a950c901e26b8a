#!/usr/bin/env bash
# Installs the Debian packages warden builds and tests with (skips apt when all are present).
set -euo pipefail
pkgs=(build-essential g++ clang clang-format cmake ninja-build pkg-config libgtest-dev nlohmann-json3-dev
      libpcre2-dev libcli11-dev libspdlog-dev libcpp-httplib-dev libboost1.81-dev libsimde-dev libxxhash-dev libucx-dev ucx-utils iproute2 python3 python3-venv python3-pip)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
