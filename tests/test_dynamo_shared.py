"""What a Dynamo export may share between components (backends/dynamo/_shared.py): a buffer a program writes stays
its own, whether it writes it in place, returns it mutated or hands it to a control-flow subgraph."""

from __future__ import annotations

import torch

from hub_export.backends.dynamo._shared import _written_buffers


class _Buffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name in ("read", "mutated", "in_scan", "viewed"):
            self.register_buffer(name, torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mutated.add_(1)  # a state update: torch.export lifts it to buffers_to_mutate

        def body(carry: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return carry + self.in_scan, carry * xs

        carry, _ = torch._higher_order_ops.scan(body, x[0], x)
        return carry + self.read + self.viewed[:2].sum()


def test_buffers_a_program_writes_are_never_shared() -> None:
    program = torch.export.export(_Buffers(), (torch.randn(4, 3),))
    assert _written_buffers(program) == {"mutated", "in_scan"}
