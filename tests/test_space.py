import pytest
import triton
from dr_kernel.space import config_dict, make_space, to_triton_config


def test_dict_space_with_constraints_counts_and_moves():
    space = make_space(
        {"BLOCK_M": [32, 64, 128, 256], "BLOCK_N": [32, 64, 128], "num_warps": [2, 4, 8]},
        constraints=["BLOCK_M * BLOCK_N <= 128 * 128"],
    )
    assert space.product_size == 36
    # Pairs with BLOCK_M * BLOCK_N <= 16384: 32:3, 64:3, 128:3, 256:2 = 11, times 3 warps.
    assert space.count_valid() == 33
    assert not space.is_valid({"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 4})
    assert "BLOCK_M * BLOCK_N" in space.why_invalid({"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 4})
    neighbours = space.neighbours({"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4})
    assert {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 4} not in neighbours
    assert {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4} in neighbours
    assert len(neighbours) == 4


def test_triton_config_list_is_exactly_those_configs():
    configs = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 256}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=4, num_stages=4),
    ]
    space = make_space(configs=configs)
    assert space.names == ["BLOCK_M", "BLOCK_N", "num_warps", "num_stages"]
    assert space.values("BLOCK_M") == [64, 128]
    assert space.count_valid() == 3
    assert sorted(map(str, space.configs())) == sorted(str(config_dict(c)) for c in configs)
    back = to_triton_config(config_dict(configs[0]))
    assert back.kwargs == {"BLOCK_M": 128, "BLOCK_N": 256} and back.num_warps == 8 and back.num_stages == 3


def test_python_predicate_and_sampling_are_seeded():
    values = {"a": list(range(1, 101)), "b": list(range(1, 101))}
    space = make_space(values, predicate=lambda c: (c["a"] + c["b"]) % 7 == 0)
    first = space.sample(seed=5, n=20)
    assert first == space.sample(seed=5, n=20)
    assert first != space.sample(seed=6, n=20)
    assert all((c["a"] + c["b"]) % 7 == 0 for c in first)
    assert len({tuple(c.values()) for c in first}) == 20


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"space": {"BLOCK": []}}, "has no values"),
        ({"space": {"BLOCK": [64, 64]}}, "twice"),
        ({"space": {"BLOCK": 64}}, "give a list of values"),
        ({"space": {"BLOCK": [64]}, "constraints": ["BLOCK_N < 2"]}, "not a parameter of the space"),
        ({"space": {"BLOCK": [64]}, "constraints": ["BLOCK <"]}, "Python syntax"),
        ({"configs": []}, "empty"),
        ({}, "exactly one"),
    ],
)
def test_malformed_spaces_say_what_to_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_space(**kwargs)
