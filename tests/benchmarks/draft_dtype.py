"""Print what a draft's own dtype costs: the default scenario with its MTP layer's experts in MXFP4 (as shipped),
beside the same model whose vendor kept the whole MTP layer in bf16.

    python -m tests.benchmarks.draft_dtype

Both workspaces get the published fixes (the MTP exclusions under the engine's names, the ROCm include guard) and
serve MTP 3/1/4 at TP8; the bf16 one also lists the MTP layer in the vendor's exclusions (``model.layers.78.*``,
so the checkpoint stores it bf16) and in the engine's (``model.decoder.*``, so the draft builds it unquantized).
Each is measured with random 1000-in / 1000-out prompts at concurrency 1 and 64. Before the draft's loaded bytes
reached the cost model the two printed the same figures.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from sandboxes.twin.workspace.materialize import materialize
from tests.twin.conftest import MTP_ENGINE_NAMES, edited_default_scenario, running

MTP = ["--tp-size", "8", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip
WHOLE_LAYER = {"vendor": r"re:model\.layers\.78\..*", "engine": r"re:model\.decoder\..*"}


def _workspace(root: Path, bf16_layer: bool) -> Path:
    def edit(data: dict) -> None:
        if bf16_layer:
            data["quantization"]["exclude"].append(WHOLE_LAYER["vendor"])

    ws = root / ("bf16" if bf16_layer else "mxfp4") / "ws"
    ws.parent.mkdir(parents=True)
    materialize(edited_default_scenario(ws.parent, edit), ws)
    cfg_path = ws / "model" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["exclude"] += MTP_ENGINE_NAMES + ([WHOLE_LAYER["engine"]] if bf16_layer else [])
    cfg_path.write_text(json.dumps(cfg))
    kernel = ws / "sglang/python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
    kernel.write_text(kernel.read_text().replace(
        "#include <cuda_runtime.h>", "#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif", 1))  # fmt: skip
    return ws


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("MTP layer   draft GB (8 GPUs)   c1 tok/s   c64 tok/s   accept")
        for bf16_layer in (False, True):
            ws = _workspace(root, bf16_layer)
            with running(ws, ws.parent / "server.log", MTP) as server:
                info = json.loads(__import__("urllib.request").request.urlopen(f"{server.url}/server_info").read())
                drafted = sum((info.get("twin") or info).get("draft_weight_bytes", {}).values()) / 1e9
                figures = []
                for c in (1, 64):
                    r = server.bench(ws.parent, "--dataset-name", "random-ids", "--random-input-len", "1000",
                                     "--random-output-len", "1000", "--random-range-ratio", "1",
                                     "--num-prompts", str(max(4 * c, 8)), "--max-concurrency", str(c))  # fmt: skip
                    figures.append(r)
            name = "bf16" if bf16_layer else "mxfp4"
            print(f"{name:11s} {drafted:17.2f}   {figures[0]['output_throughput']:8.1f}   "
                  f"{figures[1]['output_throughput']:9.1f}   {figures[1].get('accept_length', 0):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
