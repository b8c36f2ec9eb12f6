#!/usr/bin/env bash
# Install hub-export from the source tree this script belongs to (never from the package index), with the extras
# the given formats need, under the exact versions its test suite runs on (constraints.txt) and with the CPU build
# of PyTorch (its wheel index). Used by actions/setup and actions/sync.
#
#   bash actions/install.sh "onnx openvino"      # formats: space or comma separated
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
formats="${1:-}"
extras=()
for format in ${formats//,/ }; do
  case "$format" in
    dynamo) ;;  # torch.export needs no extra
    onnx|executorch|openvino) extras+=("$format") ;;
    *) echo "::error title=hub-export::unknown format '$format' (use dynamo, onnx, executorch, openvino)"; exit 1 ;;
  esac
done
spec=""
if [ "${#extras[@]}" -gt 0 ]; then spec="[$(IFS=,; echo "${extras[*]}")]"; fi

echo "::group::Install hub-export${spec} from ${root}"
python -m pip install --disable-pip-version-check --progress-bar off \
  --extra-index-url "${HUB_EXPORT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" \
  -c "${root}/constraints.txt" "${root}${spec}"
echo "::endgroup::"
hub-export --version
