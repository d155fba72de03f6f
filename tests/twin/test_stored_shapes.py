"""The checkpoint shapes ``stored.shape_of`` gives a shard of a parameter, from the parameter and its layer alone."""

from __future__ import annotations

from types import SimpleNamespace

from sandboxes.twin.models.stored import Slot, shape_of


def param(*shape: int) -> SimpleNamespace:
    return SimpleNamespace(shape=shape)


def test_a_batched_linear_stores_each_shard_as_one_whole_matrix() -> None:
    # one leading entry per shard, the layer keeps no output sizes (a batched column-parallel linear)
    batched, owner = param(2, 4096, 128), SimpleNamespace()
    assert shape_of(Slot("fused.weight", 0), batched, owner, None, shards=2) == (4096, 128)
    assert shape_of(Slot("fused.weight", 1), batched, owner, None, shards=2) == (4096, 128)


def test_a_stacked_linear_stores_each_shard_as_its_rows() -> None:
    merged = SimpleNamespace(output_sizes=[1024, 1024])
    assert shape_of(Slot("gate_up.weight", 1), param(2048, 512), merged, None, shards=2) == (1024, 512)


def test_a_parameter_whose_leading_size_is_not_its_shard_count_is_kept_whole() -> None:
    assert shape_of(Slot("x.weight", 0), param(3, 64, 8), SimpleNamespace(), None, shards=2) == (3, 64, 8)
