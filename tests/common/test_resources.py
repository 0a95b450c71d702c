"""The Resources value type: the arithmetic quotas, usage, demands and the simulator rely on."""

from common.resources import Resources


def test_resources_add_negate_scale_and_sum() -> None:
    a, b = Resources(1, 2000, 4096), Resources(2, 500, 1024)
    assert a + b == Resources(3, 2500, 5120)
    assert a + -b == Resources(-1, 1500, 3072)
    assert a * 4 == Resources(4, 8000, 16384)
    assert Resources.total([a, b, a]) == Resources(4, 4500, 9216)
    assert Resources.total([]) == Resources.ZERO == Resources()


def test_resources_shape_is_the_tuple_admission_loops_over() -> None:
    assert Resources(8, 64000, 262144).as_shape() == (8, 64000, 262144)
