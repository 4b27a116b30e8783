"""The pilot: one configuration per program, and its projection of the whole search; on recorded searches."""

from __future__ import annotations

import json

import pytest
from test_verdict import PRICES, search_tags

from gridbench.comparison import pilot, spread
from gridbench.comparison.pairing import search_price
from gridbench.gridsearch import pilot as planning
from gridbench.spec import load_spec
from gridbench.tracking import schema
from gridbench.tracking.memory_recorder import MemoryRecorder
from gridbench.tracking.records import SearchSummary, TrialRecord, params_key
from gridbench.tracking.schema import SearchStatus, TrialStatus

ONE_OFF = {"startup_s": 10.0, "compile_s": 1.0, "worker_start_s": 3.0, "end_s": 2.0}


def test_the_pilot_runs_one_configuration_per_program_and_knows_what_each_stands_for():
    spec = load_spec("mnist")  # hidden units x batch size: 4 programs; learning rate: runtime, 2 values
    assert planning.programs(spec) == {
        "batch_size=128 hidden_units=256": 2, "batch_size=128 hidden_units=512": 2,
        "batch_size=256 hidden_units=256": 2, "batch_size=256 hidden_units=512": 2,
    }  # fmt: skip
    short = planning.pilot_spec(spec, 3)
    assert short.grid_size == 4 and short.params["epochs"] == 3 and short.repeats == 1
    assert short.params["learning_rate"] == spec.grid["learning_rate"][0]
    # Every pilot configuration is a program's key: what the projection looks its trial up by.
    assert sorted(planning.programs(short)) == sorted(planning.programs(spec))
    one = spec.with_overrides(sets={"hidden_units": "256", "batch_size": "128"})
    assert "the grid has one program" in planning.describe(one, 3)


def test_pilot_epochs_and_what_a_pilot_cannot_stand_for_are_checked():
    assert planning.parse("") == 3 and planning.parse("epochs=5") == 5
    for text, message in (("epochs=1", "2 epochs at least"), ("epoch=3", "give epochs=N"), ("epochs=", "epochs=N")):
        with pytest.raises(Exception, match=message):
            planning.parse(text)
    with pytest.raises(Exception, match="cannot --resume"):
        planning.check(load_spec("mnist"), resume=True)
    with pytest.raises(Exception, match="a fused group's cost"):
        planning.check(load_spec("mnist").with_execution("fused"), resume=False)


def recorded(device, programs, whole, trials_per_program=1, epochs=3, run="p", failed=(), concurrency=1, extra=None):
    """A search recorded as a driver records one: for each program (name -> (overhead, epoch s)), its trials, one at
    a time, the first paying its worker's start; a pilot where `whole` (the tags' whole search) is given. `extra`:
    (tags, account parts) added."""
    store = MemoryRecorder("mnist")
    tags = {**search_tags(device), **(extra[0] if extra else {})}
    if whole:
        tags.update({schema.PILOT: "true", schema.PILOT_WHOLE: json.dumps(whole), schema.PILOT_WHOLE_KEY: "k"})
    store.start(run, {"epochs": epochs, "grid.units": json.dumps(list(programs)), "repeats": 1}, tags, {})
    clock, parts, index = 1010.0, {**ONE_OFF, "trial_overhead_s": 0.0, "warmup_s": 0.0, "training_s": 0.0}, 0
    parts.update(extra[1] if extra else {})
    for name, (overhead, epoch) in programs.items():
        for lr in range(trials_per_program):
            start_s = 3.0 if index == 0 else 0.0
            wall = overhead + epochs * epoch + start_s
            metrics = {schema.TRIAL_WALL_S: wall, schema.IMPORT_S: start_s, schema.TRAIN_EPOCHS_S: epochs * epoch,
                       schema.WARMUP_EPOCH_S: epoch, schema.STEADY_EPOCH_S: epoch, schema.STEADY_EPOCHS: epochs - 1.0,
                       schema.STEADY_EPOCH_STD_S: 0.0}  # fmt: skip
            status = TrialStatus.FAILED if name in failed else TrialStatus.FINISHED
            units = name.split("=")[1]
            config = {"units": units} if trials_per_program == 1 else {"units": units, "learning_rate": str(lr)}
            store.record_trial(TrialRecord(str(index), config, 0, status, metrics, {"host": "h", "pid": "1"}, clock,
                                           clock + wall), {}, {})  # fmt: skip
            clock, index = clock + wall, index + 1
            parts["trial_overhead_s"] += overhead
            parts["training_s"] += epochs * epoch
    store.parent.started_at = 1000.0
    summary = SearchSummary(index, index, 0, concurrency, clock - 1009.0, 0.0, 10.0, 0.0, None, account=parts)
    store.finish(summary, SearchStatus.FINISHED)
    return store.search_run()


# Two programs whose epochs differ 10x; the whole search: 8 configurations of each, 10 epochs.
PROGRAMS = {"units=64": (0.5, 0.2), "units=4096": (0.5, 2.0)}
WHOLE = {"epochs": 10, "configs": 16, "repeats": 1, "concurrency": 1, "programs": {"units=64": 8, "units=4096": 8}}


def test_each_configuration_costs_what_its_programs_pilot_trial_cost_at_the_whole_searchs_epochs():
    short = recorded("cpu", PROGRAMS, WHOLE)
    projected = pilot.project(short, 0.8, spread.floor("cpu"))
    # One-off parts held (16 s, of which 12 s outside the makespan), 8 trials of each program at 10 epochs.
    expected = 16.0 - 12.0 + 8 * (0.5 + 10 * 0.2) + 8 * (0.5 + 10 * 2.0)
    measured = recorded("cpu", PROGRAMS, None, trials_per_program=8, epochs=10, run="whole")
    assert projected.makespan_s.value == pytest.approx(expected, rel=0.01)
    assert projected.makespan_s.value == pytest.approx(measured.metrics["makespan_s"], rel=0.05)
    # A mean over the two programs would put the same 16 trials at 11.5 s each: the program mix matters.
    assert projected.makespan_s.low < measured.metrics["makespan_s"] < projected.makespan_s.high
    assert "error +" in pilot.check(projected, measured) or "error -" in pilot.check(projected, measured)
    assert "inside its interval" in pilot.check(projected, measured)
    assert projected.cost == pytest.approx(projected.makespan_s.value / 3600 * 0.8)


def test_the_one_off_parts_spread_as_far_as_a_pilots_stood_from_its_whole_searchs():
    short = recorded("gpu", PROGRAMS, WHOLE)
    quiet = spread.Spread(0.0, 0.1, "test")  # no run-to-run spread: only the pilot's one-off term is left
    projected = pilot.project(short, 0.8, quiet)
    relative, page = spread.pilot_one_off("gpu")
    assert 0.0 < relative < 0.5 and page.startswith("docs/results/")
    # Of ONE_OFF's 16 s, 12 s fall outside the makespan: the term holds the 4 s inside it.
    assert projected.one_off_sd_s == pytest.approx(relative * 4.0)
    # Whole searches whose one-off parts moved by that much, either way, still fall inside.
    for moved in (-relative * 4.0, relative * 4.0):
        assert projected.makespan_s.low < projected.makespan_s.value + moved < projected.makespan_s.high
    assert (
        f"held at {relative * 4.0:.1f} s: {relative:.0%} of the pilot's 4.0 s inside its makespan"
        in pilot.lines(projected)[0]
    )
    # Where the run-to-run spread is larger, it is the one used, and the line says so.
    louder = pilot.project(short, 0.8, spread.Spread(0.0, 5.0, "test"))
    assert louder.one_off_sd_s == 5.0 and "one-off parts held at 5.0 s: run to run)" in pilot.lines(louder)[0]


def test_the_pairs_compile_warm_up_is_left_out_of_the_whole_command_and_the_makespan_never_held_it():
    # The pilot pair's warm-up compiled every program for 20 s before its timed searches, outside the makespan; a
    # warm-up runs only under the persistent cache, and the whole pair's finds the programs there.
    plain = pilot.project(recorded("cpu", PROGRAMS, WHOLE), 0.8, spread.floor("cpu"))
    warmed = recorded("cpu", PROGRAMS, WHOLE, extra=({schema.COMPILE_CACHE: "persistent"}, {"compile_warmup_s": 20.0}))
    kept = pilot.project(warmed, 0.8, spread.floor("cpu"))
    assert kept.whole_command_s == pytest.approx(plain.whole_command_s)  # the 20 s are not projected again
    assert kept.makespan_s == plain.makespan_s  # and were never inside the makespan
    assert kept.warmup_left_out_s == 20.0
    assert "the pair's compile warm-up (20.0 s) left out: the whole pair finds its programs" in pilot.lines(kept)[0]
    assert "warm-up" not in pilot.lines(plain)[0].split("one-off parts held")[1]
    # A warm-up that found every program ready took next to nothing: nothing to leave out, nothing said.
    found = recorded("cpu", PROGRAMS, WHOLE, extra=({schema.COMPILE_CACHE: "persistent"}, {"compile_warmup_s": 0.01}))
    assert "warm-up" not in pilot.lines(pilot.project(found, 0.8, spread.floor("cpu")))[0].split("held")[1]


def test_a_pilot_on_an_empty_persistent_cache_says_its_makespan_leans_high():
    tags = {schema.COMPILE_CACHE: "persistent", schema.COMPILE_CACHE_STATE: "empty"}
    cold = pilot.project(recorded("cpu", PROGRAMS, WHOLE, extra=(tags, {})), 0.8, spread.floor("cpu"))
    assert "started on an empty compile cache" in pilot.lines(cold)[0] and "leans high" in pilot.lines(cold)[0]
    tags[schema.COMPILE_CACHE_STATE] = "63 entries, 1.3 MB"
    warm = pilot.project(recorded("cpu", PROGRAMS, WHOLE, extra=(tags, {})), 0.8, spread.floor("cpu"))
    assert "empty compile cache" not in pilot.lines(warm)[0]


def test_the_size_asked_keeps_the_programs_mix():
    short = recorded("cpu", PROGRAMS, WHOLE)
    double = pilot.project(short, 0.8, spread.floor("cpu"), {"configs": 32, "epochs": 5})
    assert double.whole.programs == {"units=64": 16, "units=4096": 16}
    assert double.makespan_s.value == pytest.approx(4.0 + 16 * (0.5 + 5 * 0.2) + 16 * (0.5 + 5 * 2.0), rel=0.01)


def test_the_verdict_names_both_devices_the_whole_search_and_the_pilot():
    cpu = recorded("cpu", PROGRAMS, WHOLE, run="c")
    gpu = recorded("gpu", {k: (0.3, e / 20) for k, (_, e) in PROGRAMS.items()}, WHOLE, run="g")
    found = [pilot.project(s, search_price(s, PRICES), spread.floor(d)) for s, d in ((cpu, "cpu"), (gpu, "gpu"))]
    text = pilot.verdict(*found)
    assert text.startswith("verdict: the whole search (16 configurations x 10 epochs) would take ")
    assert " on the CPU and " in text and " on the GPU: the GPU search finishes " in text and "x sooner [" in text
    assert "and costs 0.44" in text
    assert "(projected from a pilot of 2 configurations x 3 epochs that took " in text
    assert "saves little" not in text  # 38 s of pilots against a whole pair of about 270 s


def test_a_pilot_about_as_long_as_the_whole_pair_says_it_saves_little():
    tiny = {**WHOLE, "epochs": 3, "configs": 2, "programs": {"units=64": 1, "units=4096": 1}}
    cpu = recorded("cpu", PROGRAMS, tiny, run="c")
    gpu = recorded("gpu", {k: (0.3, e / 20) for k, (_, e) in PROGRAMS.items()}, tiny, run="g")
    found = [pilot.project(s, search_price(s, PRICES), spread.floor(d)) for s, d in ((cpu, "cpu"), (gpu, "gpu"))]
    whole = found[0].whole_command_s + found[1].whole_command_s
    took = found[0].pilot_command_s + found[1].pilot_command_s
    assert took >= 0.5 * whole
    said = f"that took {took:.0f} s, {took / whole:.0%} of the whole pair's projected {whole:.0f} s: at this size"
    assert f"{said} the pilot saves little" in pilot.verdict(*found)
    # Like for like: the pilot's command holds the pair's compile warm-up (10 s), and a whole pair run instead of
    # the pilot would pay it too, so the share counts it on both sides.
    warmed = recorded("cpu", PROGRAMS, tiny, run="c", extra=({schema.COMPILE_CACHE: "persistent"},
                                                              {"compile_warmup_s": 10.0}))  # fmt: skip
    cold = found[0]
    found = [pilot.project(warmed, search_price(warmed, PRICES), spread.floor("cpu")), found[1]]
    assert found[0].pilot_command_s == pytest.approx(cold.pilot_command_s + 10.0)
    assert f"that took {took + 10:.0f} s, {(took + 10) / (whole + 10):.0%} of the whole pair's projected " \
           f"{whole + 10:.0f} s" in pilot.verdict(*found)  # fmt: skip


def test_what_a_pilot_cannot_project_is_said():
    failed = recorded("cpu", PROGRAMS, WHOLE, failed=("units=4096",))
    assert "did not finish" in pilot.project(failed, 0.8, spread.floor("cpu"))
    assert "not a pilot" in pilot.project(recorded("cpu", PROGRAMS, None), 0.8, spread.floor("cpu"))


def test_a_pilot_and_the_search_it_stands_for_share_a_key():
    spec = load_spec("mnist")
    from gridbench.gridsearch.recording import search_params

    whole = {k: (json.dumps(v) if isinstance(v, list) else str(v)) for k, v in search_params(spec).items()}
    assert params_key(search_params(spec)) == params_key({**whole, "device": "gpu"})
    assert params_key(search_params(spec.with_repeats(2))) != params_key(whole)


def test_a_programs_first_use_is_paid_once_per_worker_not_by_every_configuration():
    short = recorded("cpu", PROGRAMS, WHOLE)
    first_use = {"setup_s": 1.2, "eval_s": 0.2}  # what the pilot trial, its program's first use, paid besides
    trials = tuple(type(t)(**{**vars(t), "metrics": {**t.metrics, **first_use,
                                                      schema.TRIAL_WALL_S: t.metrics[schema.TRIAL_WALL_S] + 1.4}})
                   for t in short.trials)  # fmt: skip
    paying = type(short)(short.run_id, short.tags, short.params, short.metrics, trials)
    plain = pilot.project(short, 0.8, spread.floor("cpu")).makespan_s.value
    # One worker (1 at once): each of the 2 programs pays 1.4 s once, not 8 times.
    assert pilot.project(paying, 0.8, spread.floor("cpu")).makespan_s.value == pytest.approx(plain + 2 * 1.4)
    # With 4 at once, each program's first use is paid in 4 workers: 4 x 2 x 1.4 s over 4 slots.
    wide = dict(WHOLE, concurrency=4)
    tags = {**paying.tags, schema.PILOT_WHOLE: json.dumps(wide)}
    four = type(paying)(paying.run_id, tags, paying.params, paying.metrics, trials)
    steady = (8 * (0.5 + 10 * 0.2) + 8 * (0.5 + 10 * 2.0)) / 4
    assert pilot.project(four, 0.8, spread.floor("cpu")).makespan_s.value == pytest.approx(4.0 + steady + 2 * 1.4)


def test_compare_experiment_never_takes_a_pilot_for_a_whole_search(tmp_path):
    from mlflow import MlflowClient
    from stores import new_store

    from gridbench.tracking import latest_searches

    store = new_store(tmp_path)
    client = MlflowClient(store)
    experiment = client.create_experiment("gridbench/mnist")
    ids = {}
    runs = (("cpu", "cpu", None, 1), ("gpu", "gpu", None, 2), ("cpu-pilot", "cpu", "true", 3),
            ("gpu-pilot", "gpu", "true", 4))  # the pilots are the newest  # fmt: skip
    for name, device, pilot_tag, started in runs:
        tags = {schema.KIND: "search", schema.DEVICE: device, **({schema.PILOT: pilot_tag} if pilot_tag else {})}
        run = client.create_run(experiment, start_time=started * 1000, tags=tags)
        client.set_terminated(run.info.run_id, "FINISHED")
        ids[name] = run.info.run_id
    assert latest_searches(store, "mnist") == [ids["cpu"], ids["gpu"]]
