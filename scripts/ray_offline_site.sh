#!/usr/bin/env bash
# A Ray site for a machine with no network (the GPU image has no Ray): Python 3.12 x86-64 wheels of ray
# and its needs, downloaded here, unpacked, the parts a campaign never imports left out (Java jars, the
# dashboard's web client, rllib/data/serve/train/tune/llm), tarred with xz (~24 MiB, under the device
# tool's 64 MiB carry limit). There: tar -xJf ARCHIVE -C DIR; PYTHONPATH=.:DIR (the GPU acceptance run's ray step does it).
#   bash scripts/ray_offline_site.sh [RAY_VERSION] [ARCHIVE]     (default: 2.60.0, .raysite/ray312.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.60.0}; archive=${2:-.raysite/ray312.tar.xz}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$work/whl" "ray==$version"
mkdir -p "$work/site"
for w in "$work"/whl/*.whl; do unzip -q -o "$w" -d "$work/site"; done  # unzip keeps the binaries executable
(cd "$work/site/ray" && rm -rf jars dashboard/client/build rllib data serve train tune llm)
mkdir -p "$(dirname "$archive")"
tar -C "$work/site" -cJf "$archive" .
echo "ray $version for Python 3.12: $archive ($(du -h "$archive" | cut -f1))"
