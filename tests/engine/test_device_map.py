"""Models larger than one device: the options' checks, each replica's slice of the GPUs, and exactness.

The pure parts (parsing, slicing, accelerate's execution-device rule) are checked as tables. The
exactness test loads one tiny Llama three ways on the CPU: on one device, and dispatched by accelerate
with layers offloaded to disk (an explicit mapping, and ``auto`` under a CPU cap small enough to
force it): hooks move every layer's weights in for its pass, and the scores must not move.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.engine.hf.device_map import (
    DeviceMap,
    ReplicaPlacement,
    device_map_from,
    execution_device,
    parse_size,
    plan_replica,
    replica_gpus,
    ProcessLayout,
)
from flasheval.errors import InputError
from flasheval.types import GenerationRequest, LoglikelihoodRequest, RollingLoglikelihoodRequest

SPLIT = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
         "model.norm": "cpu", "lm_head": "cpu"}


# ---------------------------------------------------------------------------------------------- the options
@pytest.mark.parametrize("given, expected", [
    (dict(device_map="auto"), DeviceMap(name="auto")),
    (dict(device_map=" sequential "), DeviceMap(name="sequential")),
    (dict(device_map="balanced", max_memory="0=70GiB, 1=70GiB ,cpu=200GB", device="auto"),
     DeviceMap(name="balanced", max_memory=((0, 70 * 2**30), (1, 70 * 2**30), ("cpu", 200 * 10**9)))),
    (dict(device_map="auto", max_memory={"cuda:1": 1024, "cpu": "1.5KiB"}),
     DeviceMap(name="auto", max_memory=((1, 1024), ("cpu", 1536)))),
    (dict(device_map='{"model.layers.0": 0, "model.layers.1": "cuda:1", "lm_head": "cpu", "x": "disk"}'),
     DeviceMap(modules=(("model.layers.0", 0), ("model.layers.1", 1), ("lm_head", "cpu"), ("x", "disk")))),
    (dict(device_map={"": "disk"}, offload_folder="~/off"), DeviceMap(modules=(("", "disk"),),
                                                                      offload_folder=str(Path("~/off").expanduser()))),
    (dict(device_map=None), None),
])
def test_device_map_options_parse(given, expected):
    assert device_map_from(**given) == expected


def test_a_device_map_file_and_a_device_map_object(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"": 0}))
    assert device_map_from(str(path)) == DeviceMap(modules=(("", 0),))
    made = DeviceMap(name="auto")
    assert device_map_from(made) is made


@pytest.mark.parametrize("given, field, message", [
    (dict(device_map="fast"), "--device-map", r"unknown device map 'fast': give a name, .*\(allowed: auto, "
                                              r"balanced, sequential\)$"),
    (dict(device_map="{nope"), "--device-map", r"not valid JSON"),
    (dict(device_map={}), "--device-map", r"non-empty mapping"),
    (dict(device_map={"lm_head": "gpu"}), "--device-map", r"module 'lm_head': unknown device 'gpu' \(allowed: GPU "
                                                          r"index N \(or cuda:N\), cpu, disk\)$"),
    (dict(device_map={"lm_head": -1}), "--device-map", r"unknown device -1"),
    (dict(device_map="auto", device="cpu"), "--device-map", r"conflicts with --device cpu: a device map places"),
    (dict(device_map="auto", device="cuda:1"), "--device-map", r"conflicts with --device cuda:1"),
    (dict(device_map="auto", max_memory="0=lots"), "--max-memory", r"'lots' is not a size: give a number and a unit"),
    (dict(device_map="auto", max_memory="70GiB"), "--max-memory", r"give DEVICE=SIZE pairs separated by commas"),
    (dict(device_map="auto", max_memory="0=1GB,0=2GB"), "--max-memory", r"device .0. given twice"),
    (dict(device_map="auto", max_memory="disk=1GB"), "--max-memory", r"disk has no cap"),
    (dict(device_map="auto", max_memory="gpu=1GB"), "--max-memory", r"a memory cap: unknown device 'gpu'"),
    (dict(device_map="auto", max_memory="0=70"), "--max-memory", r"'70' is not a size"),
    (dict(device_map={"": 0}, max_memory="0=1GB"), "--max-memory", r"an explicit mapping already says where"),
    (dict(max_memory="0=1GB"), "--max-memory", r"applies with a device map only \(e\.g\. --device-map auto\)$"),
    (dict(offload_folder="off"), "--offload-folder", r"applies with a device map only"),
    (dict(device_map="auto", offload_folder=""), "--offload-folder", r"must be a folder"),
])
def test_bad_device_map_options_are_refused_naming_the_option(given, field, message):
    with pytest.raises(InputError) as caught:
        device_map_from(**given)
    assert caught.value.field == field
    assert re.search(message, str(caught.value)), str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_offload_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match=r"field '--offload-folder': .* is a file, not a folder"):
        device_map_from("auto", offload_folder=tmp_path / "f")


def test_sizes_in_decimal_and_binary_units():
    assert [parse_size(s) for s in ("1B", "2kb", "3MB", "1.5GB", "1TB", "1KiB", "2MiB", "70GiB", "1TiB", 0)] == [
        1, 2000, 3 * 10**6, 15 * 10**8, 10**12, 1024, 2 * 2**20, 70 * 2**30, 2**40, 0]
    for bad in ("", "GiB", "-1GB", "1 PB", True, -5, 1.5):
        with pytest.raises(InputError):
            parse_size(bad)


# ---------------------------------------------------------------------------------------------- the replicas
@pytest.mark.parametrize("n_gpus, n_local, expected", [
    (8, 1, [(0, 1, 2, 3, 4, 5, 6, 7)]),
    (8, 2, [(0, 1, 2, 3), (4, 5, 6, 7)]),
    (8, 3, [(0, 1), (2, 3), (4, 5)]),  # GPUs 6 and 7 are left over (a warning says so)
    (4, 4, [(0,), (1,), (2,), (3,)]),
    (0, 2, [(), ()]),  # a CPU node: the map fills CPU memory and disk
])
def test_each_local_process_gets_its_own_slice_of_the_gpus(n_gpus, n_local, expected):
    slices = [replica_gpus(n_gpus, n_local_processes=n_local, local_process_index=i) for i in range(n_local)]
    assert slices == expected
    used = [g for s in slices for g in s]
    assert len(used) == len(set(used)) == (n_gpus // n_local) * n_local  # disjoint, and as many as divide evenly


def test_fewer_gpus_than_processes_is_refused():
    with pytest.raises(InputError, match=r"field '--device-map': 4 processes per node need at least one GPU each "
                                         r"for a device map, this node sees 2"):
        replica_gpus(2, n_local_processes=4, local_process_index=0)
    with pytest.raises(ValueError):
        replica_gpus(8, n_local_processes=2, local_process_index=2)


def test_a_replica_caps_and_maps_its_own_gpus_counted_from_its_first():
    named = DeviceMap(name="balanced", max_memory=((0, 70), (1, 60), ("cpu", 500)), offload_folder="/off")
    second = ReplicaPlacement(device_map=named, gpus=(4, 5, 6, 7), n_local_processes=2, process_index=1, world_size=2)
    free = {i: 80 for i in range(8)} | {"cpu": 1000}
    assert second.needs_free_memory
    assert second.from_pretrained_kwargs(free) == {
        "device_map": "balanced", "max_memory": {4: 70, 5: 60, 6: 80, 7: 80, "cpu": 500},
        "offload_folder": str(Path("/off") / "process-1")}
    assert second.main_device == "cuda:4"
    shared = ReplicaPlacement(device_map=DeviceMap(name="auto"), gpus=(0, 1), n_local_processes=2, world_size=2)
    assert shared.from_pretrained_kwargs(free)["max_memory"] == {0: 80, 1: 80, "cpu": 500}  # CPU shared by replicas
    alone = ReplicaPlacement(device_map=DeviceMap(name="auto"), gpus=tuple(range(8)))
    assert not alone.needs_free_memory and alone.from_pretrained_kwargs() == {"device_map": "auto"}  # accelerate's
    mapping = DeviceMap(modules=(("model.embed_tokens", 0), ("model.layers", 1), ("lm_head", "cpu")))
    placed = ReplicaPlacement(device_map=mapping, gpus=(2, 3), n_local_processes=4, process_index=5, world_size=8)
    assert placed.from_pretrained_kwargs() == {"device_map": {"model.embed_tokens": 2, "model.layers": 3,
                                                              "lm_head": "cpu"}}
    assert placed.main_device == "cuda:2"
    assert ReplicaPlacement(device_map=DeviceMap(modules=(("", "disk"),)), gpus=(0,)).main_device == "cpu"


@pytest.mark.parametrize("device_map, gpus, message", [
    (DeviceMap(modules=(("lm_head", 2),)), (4, 5), r"field '--device-map': GPU 2 does not exist: this replica has "
                                                   r"2 GPU\(s\), numbered 0 to 1 from its first \(GPU 4 of the node\)"),
    (DeviceMap(name="auto", max_memory=((0, 1),)), (), r"field '--max-memory': GPU 0 does not exist: this machine "
                                                       r"sees no GPU"),
])
def test_a_gpu_outside_the_replica_is_refused(device_map, gpus, message):
    with pytest.raises(InputError, match=message):
        ReplicaPlacement(device_map=device_map, gpus=gpus)


def test_the_process_layout_picks_this_process_slice(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    for name, value in (("WORLD_SIZE", "8"), ("LOCAL_WORLD_SIZE", "4"), ("LOCAL_RANK", "0"), ("RANK", "0")):
        monkeypatch.setenv(name, value)  # the launcher's variables are not read: the layout is given
    layout = ProcessLayout(world_size=4, process_index=3, n_local_processes=2, local_process_index=1)
    placed = plan_replica(DeviceMap(name="auto", offload_folder="/off"), layout)
    assert (placed.gpus, placed.n_local_processes, placed.process_index) == ((4, 5, 6, 7), 2, 3)
    assert placed.from_pretrained_kwargs({i: 1 for i in range(8)} | {"cpu": 10})["offload_folder"] == \
        str(Path("/off") / "process-3")


@pytest.mark.parametrize("hf_device_map, module, expected", [
    ({"model.embed_tokens": 0, "model.layers": 1, "lm_head": 1}, "model.embed_tokens", 0),
    ({"model": 3, "lm_head": 1}, "model.embed_tokens", 3),  # the longest entry that contains the module
    ({"model.embed_tokens": "cpu", "model.layers.0": 2, "model.layers.1": 1}, "model.embed_tokens", 1),  # offloaded
    ({"model.embed_tokens": "disk", "model.layers": "cpu"}, "model.embed_tokens", "cpu"),
    ({"": "disk"}, "model.embed_tokens", "cpu"),
    ({"model.embed_tokens": "mps", "lm_head": "cpu"}, "model.embed_tokens", "mps"),
])
def test_inputs_go_where_accelerate_runs_the_embeddings(hf_device_map, module, expected):
    assert execution_device(hf_device_map, module) == expected


# ---------------------------------------------------------------------------------------------- exactness
def _scores(backend) -> tuple[list[tuple[float, bool]], list[float], list[str]]:
    """Shared-context log-likelihoods (contexts of 1 to 25 tokens, 3 choices each), rolling windows, generations."""
    likelihood = [LoglikelihoodRequest(task_name="t", example_id=str(i), choice_index=c, context="Question:" * i,
                                       continuation=f" answer {c}") for i in range(4) for c in range(3)]
    rolling = [RollingLoglikelihoodRequest(task_name="r", example_id=str(i), text="the rain in spain " * (1 + 4 * i))
               for i in range(2)]  # 90 tokens: two windows of the 64-token model
    generation = [GenerationRequest(task_name="g", example_id=str(i), context=f"Say {i} things", max_new_tokens=4,
                                    stop_sequences=("\n",) if i else ()) for i in range(2)]
    return ([(r.logprob_sum, r.is_greedy) for r in backend.loglikelihood(likelihood)],
            [r.logprob_sum for r in backend.loglikelihood_rolling(rolling)],
            [r.text for r in backend.generate(generation)])


@pytest.fixture(scope="module")
def one_device(tiny_folder):
    """The tiny model on one device (the CPU, not dispatched) and its scores."""
    from flasheval.engine.hf.loading import load_hf_backend

    backend = load_hf_backend(str(tiny_folder), dtype="float32", device="cpu", batch_size=4)
    assert not hasattr(backend._model, "hf_device_map")
    return backend.fingerprint, _scores(backend)


@pytest.mark.parametrize("options", [
    dict(device_map=SPLIT, offload="split"),  # layer 1 on disk, the rest in CPU memory
    dict(device_map="auto", max_memory="cpu=100KB", offload="capped"),  # accelerate offloads what the cap leaves out
    dict(device_map={"": "disk"}, offload="disk"),  # every weight read from disk for its pass
], ids=["split", "capped", "all-on-disk"])
def test_offloaded_and_dispatched_loads_score_as_one_device(options, one_device, tiny_folder, tmp_path):
    from flasheval.engine.hf.loading import load_hf_backend

    fingerprint, (likelihood, rolling, generation) = one_device
    offload = tmp_path / options.pop("offload")
    backend = load_hf_backend(str(tiny_folder), dtype="float32", batch_size=4,
                              device_map=device_map_from(**options, offload_folder=offload))
    model = backend._model
    assert "disk" in model.hf_device_map.values() and hasattr(model, "_hf_hook")  # dispatched by accelerate
    assert any(p.device.type == "meta" for p in model.parameters())  # offloaded weights are not in memory
    assert backend.fingerprint == fingerprint  # the same model's results
    got_likelihood, got_rolling, got_generation = _scores(backend)
    assert [g for _, g in got_likelihood] == [g for _, g in likelihood]
    assert [v for v, _ in got_likelihood] == pytest.approx([v for v, _ in likelihood], abs=1e-5)
    assert got_rolling == pytest.approx(rolling, abs=1e-5) and len(rolling) == 2
    assert got_generation == generation


def test_a_model_the_caller_dispatched_is_scored_as_it_is(one_device, tiny_folder, tmp_path):
    import flasheval
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flasheval.engine.hf.backend import HFBackend

    model = AutoModelForCausalLM.from_pretrained(tiny_folder, device_map=SPLIT, offload_folder=tmp_path / "off")
    tokenizer = AutoTokenizer.from_pretrained(tiny_folder)
    likelihood, rolling, generation = _scores(HFBackend(model, tokenizer, fingerprint="x", batch_size=4))
    assert [v for v, _ in likelihood] == pytest.approx([v for v, _ in one_device[1][0]], abs=1e-5)
    assert rolling == pytest.approx(one_device[1][1], abs=1e-5) and generation == one_device[1][2]
    with pytest.raises(InputError, match=r"field '--device-map': an in-memory model runs as it is"):
        flasheval.evaluate(model, tokenizer=tokenizer, heldout=[__file__],
                           engine=flasheval.EngineOptions(device_map="auto"))


def test_a_load_that_needs_an_offload_folder_says_which_option(tiny_folder, monkeypatch):
    import transformers

    from flasheval.engine.hf.loading import load_hf_backend
    from flasheval.errors import BackendError

    def refuse(*args, **kwargs):  # what transformers says when offloaded weights must be written out (a GGUF)
        raise ValueError("The current `device_map` had weights offloaded to the disk, which needed to be re-saved. "
                         "Please provide an `offload_folder` for them")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(BackendError, match=r"cannot load model .*: ValueError: some layers fit neither the GPUs nor "
                                           r"CPU memory and must be written to disk: give --offload-folder DIR$"):
        load_hf_backend(str(tiny_folder), dtype="float32", device_map=device_map_from({"": "disk"}))


def test_evaluate_with_a_device_map_records_the_same_scores_and_fingerprint(tiny_folder, tmp_path, capsys):
    from flasheval.records.run_record import read_record

    text = tmp_path / "heldout.txt"
    text.write_text("the rain in spain stays mainly in the plain\n" * 4)
    base = ["evaluate", "--model", f"hf:{tiny_folder}", "--heldout", str(text), "--dtype", "float32", "-q"]
    assert main([*base, "--device", "cpu", "--output", str(tmp_path / "one")]) == 0
    assert main([*base, "--device-map", "auto", "--max-memory", "cpu=100KB", "--offload-folder",
                 str(tmp_path / "off"), "--output", str(tmp_path / "spread")]) == 0
    one, spread = (read_record(tmp_path / name / "summary.json").payload for name in ("one", "spread"))
    assert spread["fingerprint"] == one["fingerprint"]
    (name, loss), = one["validation"].items()
    assert loss["n_tokens"] > 0 and spread["validation"][name]["n_tokens"] == loss["n_tokens"]
    assert spread["validation"][name]["mean_nll"] == pytest.approx(loss["mean_nll"], abs=1e-6)


_LIVE = ["--device-map", "fast"]


@pytest.mark.parametrize("argv", [
    ["evaluate", "--model", "hf:{m}", "--heldout", __file__, "--output", "{t}/e", *_LIVE],
    ["place", "--model", "hf:{m}", "--output", "{t}/p", *_LIVE],
    ["sweep", "--models", "hf:{m}", "--budget-examples", "100", "--output", "{t}/s", *_LIVE],
    ["reference", "build", "--models", "a=hf:{m}", "b=hf:{m}", "--suite", "dclm-core", "--task-dir", ".", "--name",
     "n", "--output-root", "{t}/r", *_LIVE],
    ["lm-eval", "--model", "hf:{m}", "--tasks", "piqa", *_LIVE],
], ids=["evaluate", "place", "sweep", "reference-build", "lm-eval"])
def test_every_command_that_loads_a_model_takes_and_checks_the_options(argv, tiny_folder, tmp_path, capsys):
    if argv[0] == "lm-eval":
        pytest.importorskip("lm_eval")
    assert main([a.replace("{t}", str(tmp_path)).replace("{m}", str(tiny_folder)) for a in argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"flasheval: error: field '--device-map': unknown device map 'fast'", err[0]), err


@pytest.mark.slow
def test_a_gguf_file_takes_a_device_map(smollm_path, smollm_backend, tmp_path):
    """A GGUF file spread over CPU memory and disk. Read from its converted folder (the GGUF cache, which the
    ``smollm_backend`` load filled) accelerate offloads from the folder's own safetensors; dequantized from the
    file itself (no cache) the offloaded layers go to the offload folder."""
    from flasheval.engine.hf.loading import load_hf_backend, plan_hf_load

    placement = device_map_from("auto", max_memory="cpu=200MB", offload_folder=tmp_path / "off")
    backend = load_hf_backend(str(smollm_path.parent), gguf_file=smollm_path.name, dtype="float32", batch_size=16,
                              device_map=placement)
    converted = plan_hf_load(str(smollm_path.parent), gguf_file=smollm_path.name, dtype="float32").converted
    assert "disk" in backend._model.hf_device_map.values()
    assert converted is not None or any((tmp_path / "off").iterdir())
    assert backend.fingerprint == smollm_backend.fingerprint
    requests = [LoglikelihoodRequest(task_name="t", example_id=str(i), choice_index=c, context=f"The capital of {x} is",
                                     continuation=f" {y}") for i, x in enumerate(("France", "Italy"))
                for c, y in enumerate(("Paris", "Rome"))]
    got, expected = backend.loglikelihood(requests), smollm_backend.loglikelihood(requests)
    assert [r.logprob_sum for r in got] == pytest.approx([r.logprob_sum for r in expected], abs=1e-5)
