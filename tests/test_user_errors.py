"""A user's mistake is reported in pytest's conventions: the test named, its line shown, no plugin source."""

from __future__ import annotations

import pytest


def test_a_non_callable_step_is_a_clear_type_error_at_the_tests_own_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_t="""
        import torch

        def test_t(gpuperf):
            x = torch.arange(6.0)
            gpuperf.measure(x * 2)
        """
    )
    for args in ([], ["--gpuperf", "-o", "gpuperf_max_time=0.2"]):
        result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(
            [
                ">*gpuperf.measure(x [*] 2)",
                "E*TypeError: test_t.py::test_t[[]cpu[]]: gpuperf.measure() takes the step to time as a zero-argument "
                "callable, got Tensor tensor(*; pass the work itself, e.g. gpuperf.measure(lambda: model(x)), not its "
                "result",
            ]
        )
        assert "fixture.py" not in result.stdout.str()  # no plugin source in the traceback
