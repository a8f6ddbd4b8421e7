"""The trial's device path: data resident on the device, steps that never wait for it,
divergence caught at the exact step without a non-finite checkpoint, compiled and plain
checkpoints that interchange, and evaluation on the trial's device.

On a machine without CUDA the device path runs on the CPU (resident copies, device-side
indexing, the divergence watch) and on the meta device, where any read of a value on the host
raises: a training step that completes there never waits for its device.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from datakit import write_fake_cifar10
from trialkit import FAST_EVAL, StopAfter, preset

import trainables.train as train_module
from trainables.config import TrialConfig
from trainables.data import (
    DeviceStream,
    ExampleStream,
    ResidentData,
    load_data,
    resident_batches,
    view_batches,
)
from trainables.evaluation import heldout_features, score
from trainables.sources import DATA_FIELDS
from trainables.train import (
    CHECKPOINT_FILE,
    COMPILED_PREFIX,
    DivergenceWatch,
    LocalReporter,
    run_trial,
)

CPU = torch.device("cpu")
DEVICES = [CPU] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


# ---------------------------------------------------------------------------------------------
# data on the device
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "batch"), [(100, 16), (64, 32), (50, 7)])
def test_device_stream_gives_the_example_streams_batches(n, batch):
    """Epoch orders copied once and sliced give every batch of the host stream, across epoch
    boundaries (where a batch takes the tail of one order and the head of the next)."""
    stream = ExampleStream(n, batch, seed=3)
    on_device = DeviceStream(ExampleStream(n, batch, seed=3), CPU)
    for step in range(3 * n // batch + 2):
        assert torch.equal(on_device.batch(step), stream.batch(step)), step


def _trial_configs(tmp_path: Path) -> dict[str, TrialConfig]:
    write_fake_cifar10(tmp_path / "cifar", per_batch=40)
    small = {"budget_examples": 16 * 12, "batch_size": 16, "eval_marks": 2}
    return {
        "digits (float images)": TrialConfig(dataset="digits", **small),
        "cifar10 (uint8 images)": TrialConfig(
            dataset="cifar10",
            data_root=str(tmp_path / "cifar"),
            data_checksums=False,  # the files are written here, not CIFAR's own
            augmentation="crop+flip+color",
            encoder="mlp",
            **small,
        ),
        "toy with groups (vectors)": TrialConfig(
            **preset("toy_seed002") | small | {"toy_photos_per_item": 3, "toy_train_size": 96}
        ),
    }


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("start", [0, 5])
def test_resident_batches_are_the_host_batches(tmp_path, device, start):
    """The data copied to the device once and indexed there give the host path's batches and
    views (uint8 images stay uint8 until the batch is prepared), from any step on."""
    for name, config in _trial_configs(tmp_path).items():
        data = load_data(config)
        resident = ResidentData(data, device)
        assert resident.train_x.dtype == data.train_x.dtype, name
        host = list(view_batches(config, data, start, CPU))
        there = list(resident_batches(config, data, resident, start))
        assert len(host) == len(there) == config.steps - start, name
        for (s1, i1, a1, b1), (s2, i2, a2, b2) in zip(host, there, strict=True):
            assert s1 == s2 and torch.equal(i1, i2.cpu()), name
            if device.type == "cpu":  # the same generator stream: the same views, bit for bit
                assert torch.equal(a1, a2) and torch.equal(b1, b2), name
            else:  # CUDA draws its own random numbers: same shapes and dtype, views differ
                assert a1.shape == a2.shape and a1.dtype == a2.dtype, name


def test_a_worker_loads_its_dataset_once(tmp_path):
    """The next trial in the same process gets the dataset without reading it again; any field
    of DATA_FIELDS, or a changed file, is another dataset."""
    configs = _trial_configs(tmp_path)
    digits = configs["digits (float images)"]
    assert load_data(digits) is load_data(digits.model_copy(update={"seed": 9, "batch_size": 8}))
    assert load_data(digits) is not load_data(digits.model_copy(update={"data_seed": 1}))
    cifar = configs["cifar10 (uint8 images)"]
    first = load_data(cifar)
    assert load_data(cifar) is first
    batch = tmp_path / "cifar" / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(batch.read_bytes())  # same bytes, new modification time
    assert load_data(cifar) is not first


@pytest.mark.parametrize("name", ["digits", "toy", "cifar10"])
def test_data_fields_are_every_field_a_dataset_reads(tmp_path, name):
    """The cache key holds every TrialConfig field that loading reads (seen through a proxy
    that records each attribute read), so two configs that load differently never share it."""
    config = {
        "digits": TrialConfig(dataset="digits"),
        "toy": TrialConfig(**preset("toy_seed002")),
        "cifar10": _trial_configs(tmp_path)["cifar10 (uint8 images)"],
    }[name]
    read: set[str] = set()

    class Recording:
        def __getattr__(self, field: str):
            read.add(field)
            return getattr(config, field)

    from trainables.data import _load

    _load(Recording())
    fields = set(TrialConfig.model_fields)
    assert read & fields <= set(DATA_FIELDS), sorted(read & fields - set(DATA_FIELDS))


# ---------------------------------------------------------------------------------------------
# steps that never wait for the device
# ---------------------------------------------------------------------------------------------
def _trial_on(device: torch.device, config: TrialConfig, input_shape):
    """A trial's step machinery (model, optimiser, watch) on ``device``, without data."""
    trial = train_module._Trial.__new__(train_module._Trial)
    trial.config, trial.device, trial.step = config, device, 0
    trial.model = train_module.build_model(config, input_shape).to(device)
    trial.forward, trial.channels_last = trial.model, False
    trial.optimizer = train_module.make_optimizer(config, trial.model)
    trial.watch = DivergenceWatch(device)
    return trial


@pytest.mark.parametrize(
    "settings",
    [
        {"optimizer": "adam"},
        {"optimizer": "sgd", "encoder": "mlp"},
        {"optimizer": "adamw", "objective": "align_uniform", "lam_t": 2.0},
        {"encoder": "resnet18", "projection": "linear"},
    ],
    ids=lambda s: "-".join(str(v) for v in s.values()),
)
def test_a_training_step_never_reads_a_value_on_the_host(settings):
    """Forward, loss, backward, optimiser step and the watch's bookkeeping all complete on the
    meta device, where ``bool()``, ``int()``, ``.item()`` and ``.tolist()`` raise: nothing in a
    step waits for the device. The checked loss does read (and so fails there)."""
    meta = torch.device("meta")
    config = TrialConfig(dataset="digits", **settings)
    trial = _trial_on(meta, config, (3, 16, 16))
    views = torch.empty(32, 3, 16, 16, device=meta)
    for step in range(2):
        trial.step = step
        trial.train_step(views, views, None)
    assert trial.watch.first_bad.device == meta
    with pytest.raises(RuntimeError, match="meta"):
        trial.watch.settle()


class NaNAfter(torch.nn.Module):
    """The head's output becomes NaN from training forward number ``at`` on (a divergence at a
    known step)."""

    def __init__(self, head: torch.nn.Module, at: int) -> None:
        super().__init__()
        self.head, self.at, self.calls = head, at, 0

    def forward(self, h):
        z = self.head(h)
        if self.training:
            self.calls += 1
            if self.calls > self.at:
                return z * math.nan
        return z


def _diverging(monkeypatch, at: int) -> None:
    real_build = train_module.build_model

    def build(config, input_shape):
        model = real_build(config, input_shape)
        model.head = NaNAfter(model.head, at)
        return model

    monkeypatch.setattr(train_module, "build_model", build)


@pytest.mark.parametrize("poll", ["every step", "only at evaluations"])
@pytest.mark.parametrize("at", [0, 4, 5, 9, 11])
def test_divergence_is_caught_at_its_step_without_a_non_finite_checkpoint(
    tmp_path, monkeypatch, poll, at
):
    """The loss first turns NaN at step ``at``. Whether the watch sees it at once or only when
    the loop settles before an evaluation (the most a device can lag), the trial reports
    ``diverged`` with exactly ``at`` steps done, reports nothing after it, and every checkpoint
    it wrote holds finite parameters."""
    _diverging(monkeypatch, at)
    if poll == "only at evaluations":
        monkeypatch.setattr(DivergenceWatch, "poll", lambda self: None)
    config = TrialConfig(
        **preset("digits") | FAST_EVAL | {"budget_examples": 64 * 12, "batch_size": 64,
                                         "eval_marks": 4, "eval_at_start": True},
    )  # fmt: skip
    reporter = LocalReporter(tmp_path / "ckpt", keep=10)
    result = run_trial(config, reporter)
    assert result["status"] == "diverged"
    assert result["steps"] == at and result["examples_seen"] == 64 * at
    assert math.isnan(result["train/loss"])
    steps = [s for s, _ in reporter.history]
    assert steps[-1] == 64 * at and all(s <= 64 * at for s in steps)
    assert all(math.isfinite(m["train/loss"]) for s, m in reporter.history[1:-1])
    for folder in reporter.checkpoints():
        state = torch.load(folder / CHECKPOINT_FILE, weights_only=True)
        assert state["step"] <= at
        assert all(bool(torch.isfinite(v).all()) for v in state["model"].values()), folder


def test_divergence_with_groups_is_caught_at_its_step(monkeypatch):
    """With groups, info_nce checks its input on the host and the loop ends at that step."""
    _diverging(monkeypatch, 3)
    config = TrialConfig(
        **preset("toy_seed002") | {"toy_photos_per_item": 2, "group_policy": "mask",
                                  "budget_examples": 128 * 8, "eval_marks": 2},
    )  # fmt: skip
    result = run_trial(config)
    assert result["status"] == "diverged" and result["steps"] == 3


# ---------------------------------------------------------------------------------------------
# compiled and plain checkpoints
# ---------------------------------------------------------------------------------------------
def _compile_config(mode: str) -> TrialConfig:
    return TrialConfig(
        **preset("toy_seed002") | {"budget_examples": 128 * 8, "eval_marks": 4,
                                  "probe_train_size": 200, "compile": mode},
    )  # fmt: skip


NO_COMPILER = shutil.which("g++") is None and shutil.which("c++") is None


@pytest.mark.skipif(NO_COMPILER, reason="torch.compile's inductor needs a C++ compiler on the CPU")
@pytest.mark.parametrize(("first", "then"), [("on", "off"), ("off", "on")])
def test_compiled_and_plain_checkpoints_interchange(tmp_path, first, then):
    """A trial stopped after its second checkpoint resumes with ``compile`` switched, from the
    same state (the plain module's keys are saved either way), and ends where an uninterrupted
    plain trial ends. torch.compile runs with the real inductor backend."""
    with pytest.raises(KeyboardInterrupt):
        run_trial(_compile_config(first), StopAfter(tmp_path / "run", n=2))
    reporter = LocalReporter(tmp_path / "run", keep=10)
    state = torch.load(Path(reporter.latest_checkpoint()) / CHECKPOINT_FILE, weights_only=True)
    assert not any(k.startswith(COMPILED_PREFIX) for k in state["model"])
    resumed = run_trial(_compile_config(then), reporter)
    plain = run_trial(_compile_config("off"))
    assert resumed["status"] == plain["status"] == "finished"
    assert resumed["steps"] == plain["steps"] == 8
    compiled_before = state["times"]["compile_s"]  # times add up across resumes
    assert (compiled_before > 0) == (first == "on")
    assert (resumed["time/compile_s"] > compiled_before) == (then == "on")
    for key in ("train/loss", "z/align", "z/uniform", "probe/knn_top1_h"):
        assert resumed[key] == pytest.approx(plain[key], rel=1e-3, abs=1e-3), key


def test_a_checkpoint_saved_from_a_compiled_module_loads(tmp_path):
    """State dicts taken from torch.compile's wrapper (keys prefixed ``_orig_mod.``) load into
    the trial's plain module."""
    config = _compile_config("off")
    with pytest.raises(KeyboardInterrupt):
        run_trial(config, StopAfter(tmp_path / "run", n=1))
    reporter = LocalReporter(tmp_path / "run", keep=10)
    path = Path(reporter.latest_checkpoint()) / CHECKPOINT_FILE
    state = torch.load(path, weights_only=True)
    saved = dict(state["model"])
    state["model"] = {COMPILED_PREFIX + k: v for k, v in saved.items()}
    torch.save(state, path)
    resumed = run_trial(config, reporter)
    assert resumed["status"] == "finished" and resumed["steps"] == 8


# ---------------------------------------------------------------------------------------------
# evaluation on the trial's device
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_evaluation_on_the_device_equals_the_cpu_evaluation(device):
    """Held-out diagnostics and both probes scored where the features are (the trial's device,
    data resident there) equal the CPU's scoring of the same features within 1e-5; the linear
    probe runs in float64 on both."""
    config = TrialConfig(
        **preset("digits") | FAST_EVAL | {"budget_examples": 128 * 4, "eval_marks": 1}
    )
    data = load_data(config)
    model = train_module.build_model(config, data.input_shape).to(device)
    on_device = heldout_features(config, model, data, device, ResidentData(data, device))
    from_host = heldout_features(config, model, data, device)
    for key, value in on_device.items():
        if isinstance(value, torch.Tensor):
            assert value.device.type == device.type, key
            torch.testing.assert_close(value, from_host[key], rtol=0, atol=0)
    on_cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in on_device.items()}
    got, want = score(config, on_device), score(config, on_cpu)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-5), key


# ---------------------------------------------------------------------------------------------
# benchmarks/gpu.py: runs where only the trial path's packages are installed
# ---------------------------------------------------------------------------------------------
ABSENT_ON_THE_GPU_MACHINE = (
    "ray", "mlflow", "optuna", "pyDOE", "pyDOE3", "statsmodels", "pyarrow", "pandas",
    "matplotlib", "typer", "rich",
)  # fmt: skip


@pytest.mark.long
def test_gpu_benchmark_smoke_without_the_study_packages(tmp_path):
    """Every part of benchmarks/gpu.py, tiny, on the CPU, in processes where Ray, MLflow,
    Optuna and the analysis packages cannot be imported (as on the GPU machine, which has
    torch, torchvision, numpy, scikit-learn, pyyaml and pydantic): the trial path needs none of
    them, and (c) falls back to processes."""
    import os
    import subprocess
    import sys

    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import importlib.machinery, sys\n"
        f"ABSENT = {ABSENT_ON_THE_GPU_MACHINE!r}\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ABSENT:  # found nowhere; importing it fails\n"
        "            return importlib.machinery.ModuleSpec(name, self)\n"
        "    def create_module(self, spec):\n"
        "        raise ImportError(f'{spec.name} is not installed here', name=spec.name)\n"
        "    def exec_module(self, module):\n"
        "        pass\n"
        "sys.meta_path.insert(0, Absent())\n"
    )
    scratch = tmp_path / "scratch"  # where it writes its CIFAR-10 files, and must remove them
    scratch.mkdir()
    env = os.environ | {"PYTHONPATH": str(blocker), "TMPDIR": str(scratch)}
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "benchmarks/gpu.py", "--smoke", "--device", "cpu"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "(within 1e-5)" in out
    for part in ("(a)", "(b)", "(c)", "(d)"):
        assert f"| {part} |" in out, part
    assert "processes (no Ray here)" in out
    assert "| (d) | nt_xent at B = 512" in out and "| (d) | info_nce at B = 512" in out
    assert not [p for p in scratch.iterdir() if p.name.startswith("cifar-bench-")]


def test_the_device_copy_is_kept_for_the_same_bundle():
    """The next trial on the same dataset (the same bundle from load_data's cache) reuses the
    device copy; another dataset replaces it."""
    from trainables.device import resident_data

    digits = load_data(TrialConfig(dataset="digits"))
    first = resident_data(digits, CPU)
    assert resident_data(load_data(TrialConfig(dataset="digits", seed=5)), CPU) is first
    other = load_data(TrialConfig(dataset="digits", data_seed=1))
    assert resident_data(other, CPU) is not first


@pytest.mark.parametrize("encoder", ["small_cnn", "mlp"])
def test_a_convolutional_encoder_trains_channels_last_on_the_cpu_too(encoder):
    """oneDNN's convolutions are faster channels_last (``benchmarks/trial.py --layout both``:
    the default study's steps 15-25% shorter on 2 cores); a layout means nothing to an MLP."""
    config = TrialConfig(dataset="digits", encoder=encoder, device="cpu", batch_size=16)
    trial = train_module._Trial(config, None)
    assert trial.device.type == "cpu" and trial.channels_last == (encoder == "small_cnn")
    weights = [p for p in trial.model.parameters() if p.dim() == 4]
    assert all(w.is_contiguous(memory_format=torch.channels_last) for w in weights)
    assert bool(weights) == (encoder == "small_cnn")
