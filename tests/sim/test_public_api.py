"""boundedgate.sim's public surface: exported once, documented, every member too."""

from __future__ import annotations

import inspect

import boundedgate.sim


def test_all_is_a_tuple_of_the_public_names() -> None:
    assert isinstance(boundedgate.sim.__all__, tuple)
    public = {n for n in dir(boundedgate.sim) if not n.startswith("_")}
    assert public == set(boundedgate.sim.__all__)


def test_every_public_name_lives_in_boundedgate_sim_and_has_a_docstring() -> None:
    for name in boundedgate.sim.__all__:
        obj = getattr(boundedgate.sim, name)
        assert obj.__module__ == "boundedgate.sim", name
        assert inspect.getdoc(obj), name
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_") or "mutmut" in attr:
                continue
            if inspect.isfunction(member) or isinstance(member, (property, classmethod)):
                assert inspect.getdoc(member), f"{name}.{attr}"


def test_the_simulate_docstring_example_runs() -> None:
    # The example in simulate's docstring is the seed's table; keep it true.
    import doctest

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(boundedgate.sim.simulate, "simulate", globs={}):
        runner.run(test)
    assert runner.failures == 0
    assert runner.tries >= 3
