"""Tune's trial actors without a runtime_env where a local Ray's workers inherit Tune's variables (plain_workers)."""

import pytest

from gridbench.errors import UserError
from gridbench.gridsearch import plain_workers


def test_the_copy_of_tunes_default_variables_is_tunes():
    """Fails when Ray Tune changes the variables it gives its actors: the copy set before ray.init must follow."""
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS

    assert plain_workers.TUNE_DEFAULT_ENV_VARS == DEFAULT_ENV_VARS


def test_tunes_variables_are_set_for_the_raylet_and_unset_after():
    environ = {"HOME": "/root"}
    inherited, added = plain_workers.inherit_tune_env(environ)
    assert inherited == {"HOME": "/root", "PL_DISABLE_FORK": "1"} == environ and added == ["PL_DISABLE_FORK"]
    plain_workers.forget(added, environ)
    assert environ == {"HOME": "/root"}


def test_a_variable_set_otherwise_keeps_tunes_runtime_env_and_the_users_value():
    environ = {"PL_DISABLE_FORK": "0"}
    assert plain_workers.inherit_tune_env(environ) == (None, [])
    assert environ == {"PL_DISABLE_FORK": "0"}


@pytest.mark.parametrize(
    "inherited, actor_env, expected",
    [
        ({"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "k"}, {"env_vars": {"PL_DISABLE_FORK": "1"}}, True),
        ({"PL_DISABLE_FORK": "1"}, {"env_vars": {"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "k"}}, False),
        ({"PL_DISABLE_FORK": "1"}, {"env_vars": {"PL_DISABLE_FORK": "1"}, "pip": ["x"]}, False),
        (None, {"env_vars": {}}, False),
    ],
)
def test_workers_inherit_an_actors_env_only_where_every_variable_is_already_theirs(inherited, actor_env, expected):
    assert plain_workers.inherits(inherited, actor_env) is expected


def _runtime_env(remote_cls):
    return (remote_cls._default_options or {}).get("runtime_env")


def test_tunes_actors_lose_their_runtime_env_while_tune_runs_and_get_it_back_after(monkeypatch):
    from ray.tune.execution.class_cache import _ActorClassCache

    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)

    class Trainable:
        pass

    plain = plain_workers.actors_can_inherit({"PL_DISABLE_FORK": "1"})
    assert plain is True
    with plain_workers.trial_actors_plain(plain):
        assert _runtime_env(_ActorClassCache().get(Trainable)) is None
    assert _runtime_env(_ActorClassCache().get(Trainable)) == {"env_vars": {"PL_DISABLE_FORK": "1"}}


def test_a_variable_the_workers_lack_keeps_tunes_runtime_env(monkeypatch):
    from ray.tune.execution.class_cache import _ActorClassCache

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "set after the raylet started")

    class Trainable:
        pass

    plain = plain_workers.actors_can_inherit({"PL_DISABLE_FORK": "1"})
    assert plain is False
    with plain_workers.trial_actors_plain(plain):
        assert _runtime_env(_ActorClassCache().get(Trainable))["env_vars"]["AWS_ACCESS_KEY_ID"] == (
            "set after the raylet started"
        )


def test_plain_workers_are_the_default_and_0_turns_them_off():
    assert plain_workers.wanted({}) and plain_workers.wanted({"GRIDBENCH_PLAIN_WORKERS": "1"})
    assert not plain_workers.wanted({"GRIDBENCH_PLAIN_WORKERS": "0"})
    with pytest.raises(UserError, match="GRIDBENCH_PLAIN_WORKERS='off': say 1 .* or 0"):
        plain_workers.wanted({"GRIDBENCH_PLAIN_WORKERS": "off"})


def test_a_ray_whose_class_cache_moved_keeps_tunes_runtime_env(monkeypatch):
    from ray.tune.execution import class_cache

    assert plain_workers.actors_can_inherit(None) is False  # nothing inherited: Tune's way
    monkeypatch.delattr(class_cache._ActorClassCache, "get")
    assert plain_workers.actors_can_inherit({"PL_DISABLE_FORK": "1"}) is False
    monkeypatch.delattr(class_cache, "DEFAULT_ENV_VARS")  # the names moved: no AttributeError out of the search
    assert plain_workers.actors_can_inherit({"PL_DISABLE_FORK": "1"}) is False


def test_a_search_decides_once_and_says_when_the_workers_asked_for_take_no_trial(monkeypatch, capsys):
    from gridbench.gridsearch.ray_session import RaySession

    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    plain = RaySession()
    plain.inherited_env, plain.workers_prestarted = {"PL_DISABLE_FORK": "1"}, 2
    assert plain.trial_workers == "plain" and plain.actors_plain is True
    differs = RaySession()
    differs.inherited_env, differs.workers_prestarted = {"PL_DISABLE_FORK": "0"}, 2
    assert differs.trial_workers == "runtime_env" and differs.actors_plain is False
    differs.inherited_env = {"PL_DISABLE_FORK": "1"}  # decided once: the tag and Tune's run cannot disagree
    assert differs.actors_plain is False
    err = capsys.readouterr().err
    assert err.count("the workers started ahead will not take trials") == 1, err
